package registry

import (
	"sync"
	"testing"
	"time"
)

// steppedClock is a machine clock whose wall reading an operator or NTP can
// step while its monotonic time runs on undisturbed.
type steppedClock struct {
	mu   sync.Mutex
	wall time.Time
	mono time.Duration
}

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

func (c *steppedClock) Monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// Advance lets d pass: both readings move.
func (c *steppedClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.wall, c.mono = c.wall.Add(d), c.mono+d
	c.mu.Unlock()
}

// Step steps the wall clock only, as date -s or an NTP step does.
func (c *steppedClock) Step(d time.Duration) {
	c.mu.Lock()
	c.wall = c.wall.Add(d)
	c.mu.Unlock()
}

// TestLeasesIgnoreWallClockSteps steps a node's wall clock both ways: a step
// forward must not expire every lease at the next scan (an edge box that
// booted without a real-time clock and then synced would drop every route
// at once), and a step back must not keep a dead broker's lease for as long
// as the step.
func TestLeasesIgnoreWallClockSteps(t *testing.T) {
	clk := &steppedClock{wall: time.Unix(1_700_000_000, 0), mono: 5 * time.Second}
	r := New(Config{Clock: clk})
	res := mustRegister(t, r, reg("c1", "b1", 0, "10.0.0.1:10911", "orders"))
	if want := clk.Now().Add(DefaultThreshold); !res.Deadline.Equal(want) {
		t.Fatalf("granted deadline %v, want %v", res.Deadline, want)
	}

	clk.Advance(10 * time.Second)
	clk.Step(24 * time.Hour)
	if expired := r.ExpireDue(); len(expired) != 0 {
		t.Fatalf("a wall-clock step of a day forward expired %d leases 10 s after registration", len(expired))
	}
	mustRoute(t, r, "orders")
	l, ok := r.Lease("c1", "10.0.0.1:10911")
	if !ok {
		t.Fatal("lease gone after the step")
	}
	// What the node shows follows the wall clock as it now reads.
	if left := l.Deadline.Sub(clk.Now()); left != DefaultThreshold-10*time.Second {
		t.Errorf("lease deadline %v after the step, %v from now, want %v", l.Deadline, left, DefaultThreshold-10*time.Second)
	}
	if ago := clk.Now().Sub(l.LastHeartbeat); ago != 10*time.Second {
		t.Errorf("last heartbeat %v ago after the step, want 10s", ago)
	}

	if _, err := r.Heartbeat("c1", "10.0.0.1:10911", res.Epoch, l.DataVersion); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	clk.Step(-48 * time.Hour)
	clk.Advance(DefaultThreshold)
	if expired := r.ExpireDue(); len(expired) != 1 {
		t.Fatalf("a silent broker's lease, a threshold after its heartbeat and a wall-clock step of two days back: %d expired, want 1", len(expired))
	}
}
