package registry

import (
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// TestFreshness: a group's freshness is that of its freshest member, for
// groups named directly or through their topics, and nothing else.
func TestFreshness(t *testing.T) {
	r, clk := newTestRegistry(t)
	start := clk.Now()
	mustRegister(t, r, reg("c", "a", 0, "10.0.0.1:1", "t1"))
	mustRegister(t, r, reg("c", "a", 1, "10.0.0.2:1"))
	mustRegister(t, r, reg("c", "b", 0, "10.0.0.3:1", "t2"))
	clk.Advance(10 * time.Second)
	l, _ := r.Lease("c", "10.0.0.2:1")
	if _, err := r.Heartbeat("c", "10.0.0.2:1", l.Epoch, wire.DataVersion{Counter: 1}); err != nil {
		t.Fatal(err)
	}
	got := r.Freshness([]string{"t1", "no-such-topic"}, []string{"b", "no-such-group"})
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("freshness of %+v, want groups a and b", got)
	}
	threshold := DefaultThreshold
	if want := start.Add(10 * time.Second); !got[0].LastHeard.Equal(want) || !got[0].Deadline.Equal(want.Add(threshold)) {
		t.Errorf("group a: %+v, want last heard %s (the slave's heartbeat)", got[0], want)
	}
	if !got[1].LastHeard.Equal(start) || !got[1].Deadline.Equal(start.Add(threshold)) {
		t.Errorf("group b: %+v, want last heard %s", got[1], start)
	}
	if got := r.Freshness(nil, nil); len(got) != 0 {
		t.Errorf("freshness of nothing: %+v", got)
	}
}
