package node

import (
	"sync"
	"time"
)

// readWatchdog enforces a stream's read deadlines (the idle timeout for a
// frame's header, the read timeout for its body) with one timer per
// stream server, instead of a quic-go read deadline set twice per frame:
// a quic-go Read under a deadline that has to wait starts and stops a
// timer of its own each time (and selects on it), and every
// SetReadDeadline wakes a waiting reader once for nothing. Reads here
// have no deadline until one is due: then the watchdog sets the stream's
// read deadline to now, which ends the blocked Read with
// os.ErrDeadlineExceeded, as a deadline set up front would have.
//
// The timer is moved only earlier: a later due (the next frame's) is
// noticed when the timer fires, which re-arms it for what is due then. On
// a busy stream it fires about once per read timeout, not per frame.
type readWatchdog struct {
	mu      sync.Mutex
	target  deadliner // the stream being served; nil between streams
	due     time.Time // zero: nothing due
	timer   *time.Timer
	timerAt time.Time // when the timer fires; zero when it is not armed
	fired   bool      // target's read deadline was set to cut a read off
}

// deadliner is the part of *quic.Stream the watchdog needs.
type deadliner interface{ SetReadDeadline(time.Time) error }

func newReadWatchdog() *readWatchdog {
	d := &readWatchdog{}
	d.timer = time.AfterFunc(time.Hour, d.fire)
	d.timer.Stop()
	return d
}

// watch starts watching s, with nothing due yet.
func (d *readWatchdog) watch(s deadliner) {
	d.mu.Lock()
	d.target, d.due, d.fired = s, time.Time{}, false
	d.mu.Unlock()
}

// release stops watching the stream it watched.
func (d *readWatchdog) release() {
	d.mu.Lock()
	d.target, d.due, d.fired = nil, time.Time{}, false
	d.mu.Unlock()
}

// stop ends the watchdog for good.
func (d *readWatchdog) stop() {
	d.release()
	d.timer.Stop()
}

// set makes the stream's reads from now on due by due. A read cut off by
// an earlier due has ended with an error, so clearing the stream's
// deadline here only matters when the cut raced with a read that had
// just completed: the next read must not fail for a due that has passed.
func (d *readWatchdog) set(due time.Time) {
	d.mu.Lock()
	d.due = due
	if d.fired {
		d.target.SetReadDeadline(time.Time{})
		d.fired = false
	}
	if d.timerAt.IsZero() || due.Before(d.timerAt) {
		d.timerAt = due
		d.timer.Reset(time.Until(due))
	}
	d.mu.Unlock()
}

// fire runs when the timer does: it cuts off the read in progress if its
// due has passed, and otherwise re-arms the timer for the current due.
func (d *readWatchdog) fire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.timerAt = time.Time{}
	if d.target == nil || d.due.IsZero() {
		return
	}
	now := time.Now()
	if now.Before(d.due) {
		d.timerAt = d.due
		d.timer.Reset(d.due.Sub(now))
		return
	}
	d.fired = true
	d.target.SetReadDeadline(now)
}
