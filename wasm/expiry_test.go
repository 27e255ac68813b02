package wasm

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// lease returns a lease with beats heartbeats at the given interval, a
// little irregular.
func lease(beats uint64, every time.Duration) wire.LeaseSnapshot {
	l := wire.LeaseSnapshot{
		Cluster: "C", Addr: "10.0.0.1:10911", BrokerName: "a", Epoch: 3,
		Heartbeats: beats, LastHeartbeat: time.Unix(1_700_000_000, 0),
	}
	for i := range min(int(beats), wire.IntervalWindow) {
		l.Intervals[i] = every + time.Duration(i%2)*every/2
	}
	return l
}

func TestThresholdComputedOutOfLine(t *testing.T) {
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{})
	l := lease(20, 30*time.Second)
	if got := s.Threshold(l); got != 0 {
		t.Fatalf("no policy: %v, want 0", got)
	}
	activate(t, s, HookExpiryThreshold, load(t, h, "self-preservation.wasm"))
	// The first heartbeat gets the default and queues the computation.
	if got := s.Threshold(l); got != 0 {
		t.Fatalf("first heartbeat: %v, want 0", got)
	}
	waitFor(t, func() bool { return s.Threshold(l) != 0 })
	// Intervals of 30 s and 45 s: mean 37.5 s, jitter 7.5 s, a missed
	// heartbeat in every second interval (loss 4/12), so
	// ceil(ln 1e-6/ln(1/3)) = 13 gaps, capped at 12, of 67.5 s each.
	if got, want := s.Threshold(l), 10*time.Minute; got != want {
		t.Errorf("threshold %v, want %v (clamped)", got, want)
	}
	st := intervalStats(l, 30*time.Second)
	if st.MeanIntervalMs != 37500 || st.JitterMs != 7500 || st.Missed != 4 || st.LossPermille != 333 {
		t.Errorf("stats %+v", st)
	}
}

func TestConfirmExpirySelfPreservation(t *testing.T) {
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{HeartbeatInterval: 30 * time.Second})
	due := make([]wire.LeaseSnapshot, 40)
	for i := range due {
		due[i] = wire.LeaseSnapshot{Cluster: "C", Addr: fmt.Sprint("10.0.0.", i), Epoch: uint64(i)}
	}
	stats := wire.ExpiryStats{Leases: 100, Due: 40}
	if got := s.ConfirmExpiry(due, stats); len(got) != 40 {
		t.Fatalf("no policy: %d removed, want all 40", len(got))
	}
	activate(t, s, HookExpiryConfirm, load(t, h, "self-preservation.wasm"))
	got := s.ConfirmExpiry(due, stats)
	if len(got) != 15 {
		t.Fatalf("%d removed, want 15 (15%% of 100 leases)", len(got))
	}
	seen := map[string]bool{}
	for _, l := range got {
		if seen[l.Addr] {
			t.Fatalf("%s removed twice", l.Addr)
		}
		seen[l.Addr] = true
	}

	// One heartbeat seen in a full minute where 100 brokers owed 200:
	// the node is the one cut off, and nobody is removed.
	t0 := time.Unix(1_700_000_000, 0)
	s.cfg.Now = func() time.Time { return t0.Add(61 * time.Second) }
	s.beats = newBeatRate(30 * time.Second)
	s.beats.observe(t0)
	s.beats.observe(t0.Add(61 * time.Second))
	if got := s.beats.rate(t0.Add(61*time.Second), 100); got != 5 {
		t.Errorf("success rate %d‰, want 5", got)
	}
	if got := s.ConfirmExpiry(due, stats); len(got) != 0 {
		t.Errorf("%d removed during self-preservation", len(got))
	}
}

func TestBeatRate(t *testing.T) {
	r := newBeatRate(30 * time.Second)
	t0 := time.Unix(1_700_000_000, 0)
	if got := r.rate(t0, 10); got != 1000 {
		t.Errorf("before a full window: %d", got)
	}
	for i := range 20 { // 10 brokers, 60 s window, 30 s period: 20 expected
		r.observe(t0.Add(time.Duration(i) * 3 * time.Second))
	}
	if got := r.rate(t0.Add(61*time.Second), 10); got != 1000 {
		t.Errorf("all heartbeats: %d‰", got)
	}
	if got := r.rate(t0.Add(200*time.Second), 10); got != 0 {
		t.Errorf("after silence: %d‰", got)
	}
}

func TestHistogram(t *testing.T) {
	var h histogram
	if h.quantile(0.5) != 0 {
		t.Fatal("empty histogram")
	}
	for i := 1; i <= 100; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Microsecond}, {0.99, 99 * time.Microsecond}} {
		got := h.quantile(q.q)
		if got < q.want || got > q.want*5/4 {
			t.Errorf("p%v = %v, want within 25%% above %v", q.q*100, got, q.want)
		}
	}
}
