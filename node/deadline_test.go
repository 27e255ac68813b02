package node

import (
	"sync"
	"testing"
	"time"
)

// deadlineRecorder records the read deadlines a watchdog sets.
type deadlineRecorder struct {
	mu  sync.Mutex
	set []time.Time
}

func (r *deadlineRecorder) SetReadDeadline(t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.set = append(r.set, t)
	return nil
}

func (r *deadlineRecorder) calls() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.set...)
}

// waitCalls polls until r has recorded n deadlines.
func waitCalls(t *testing.T, r *deadlineRecorder, n int) []time.Time {
	t.Helper()
	for i := 0; ; i++ {
		if c := r.calls(); len(c) >= n {
			return c
		}
		if i == 1000 {
			t.Fatalf("deadlines set: %v, want %d", r.calls(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReadWatchdog: a due that passes sets the stream's read deadline (so
// a blocked Read ends with a deadline error); a due moved later before it
// passes sets nothing; one moved earlier is kept; and after a cut, the
// next due clears the deadline first, so a read that completed as the cut
// came is not failed by it.
func TestReadWatchdog(t *testing.T) {
	t.Run("due passes", func(t *testing.T) {
		wd := newReadWatchdog()
		defer wd.stop()
		r := &deadlineRecorder{}
		wd.watch(r)
		due := time.Now().Add(20 * time.Millisecond)
		wd.set(due)
		c := waitCalls(t, r, 1)
		if c[0].Before(due) {
			t.Fatalf("cut at %v, before the due %v", c[0], due)
		}
		// The next due clears the cut first.
		wd.set(time.Now().Add(time.Hour))
		if c := r.calls(); len(c) != 2 || !c[1].IsZero() {
			t.Fatalf("deadlines after a new due: %v, want the cut cleared", c)
		}
	})
	t.Run("moved later", func(t *testing.T) {
		wd := newReadWatchdog()
		defer wd.stop()
		r := &deadlineRecorder{}
		wd.watch(r)
		wd.set(time.Now().Add(20 * time.Millisecond))
		later := time.Now().Add(time.Hour)
		wd.set(later)
		// The timer fires at the first due, finds the later one and
		// re-arms for it.
		waitTimerAt(t, wd, later)
		if c := r.calls(); len(c) != 0 {
			t.Fatalf("deadlines set for a due that did not pass: %v", c)
		}
	})
	t.Run("moved earlier", func(t *testing.T) {
		wd := newReadWatchdog()
		defer wd.stop()
		r := &deadlineRecorder{}
		wd.watch(r)
		wd.set(time.Now().Add(time.Hour))
		wd.set(time.Now().Add(20 * time.Millisecond))
		waitCalls(t, r, 1) // within the poll's bound, not the hour
	})
	t.Run("released", func(t *testing.T) {
		wd := newReadWatchdog()
		defer wd.stop()
		r := &deadlineRecorder{}
		wd.watch(r)
		wd.set(time.Now().Add(10 * time.Millisecond))
		wd.release()
		next := &deadlineRecorder{}
		wd.watch(next)
		later := time.Now().Add(time.Hour)
		wd.set(later)
		waitTimerAt(t, wd, later) // the released due has come and gone
		if c := r.calls(); len(c) != 0 {
			t.Fatalf("a released stream's due cut it: %v", c)
		}
		if c := next.calls(); len(c) != 0 {
			t.Fatalf("the last stream's due cut the next: %v", c)
		}
	})
}

// waitTimerAt polls until wd's timer is armed for at.
func waitTimerAt(t *testing.T, wd *readWatchdog, at time.Time) {
	t.Helper()
	for i := 0; ; i++ {
		wd.mu.Lock()
		got := wd.timerAt
		wd.mu.Unlock()
		if got.Equal(at) {
			return
		}
		if i == 1000 {
			t.Fatalf("timer at %v, want re-armed for %v", got, at)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
