package wasm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// TestSwapWhileExpiryRuns swaps, rolls back and removes the threshold and
// confirm policies while heartbeats ask for thresholds and expiry scans
// ask for confirmations, as the registry does: every answer is one the
// registry may apply (a confirmed subset of what was due, a threshold in
// range or 0), and once the set and the caller's references are closed
// every module is destroyed and every instance token is back in the
// node-wide budget: swaps leak neither.
func TestSwapWhileExpiryRuns(t *testing.T) {
	h := newHost(t, HostConfig{PoolSize: 2})
	sp, jitter := load(t, h, "self-preservation.wasm"), load(t, h, "jitter-threshold.wasm")
	s := newSet(t, h, SetConfig{})
	now := time.Now()
	due := make([]wire.LeaseSnapshot, 4)
	for i := range due {
		due[i] = wire.LeaseSnapshot{Cluster: "c", Addr: fmt.Sprintf("10.0.0.%d:1", i), BrokerName: "b", Epoch: uint64(i + 1),
			LastHeartbeat: now.Add(-3 * time.Minute), Deadline: now.Add(-time.Minute), Heartbeats: 3,
			Intervals: [wire.IntervalWindow]time.Duration{30 * time.Second, 30 * time.Second, 31 * time.Second}}
	}
	var scans, beats atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // expiry scans
		for {
			select {
			case <-stop:
				return
			default:
			}
			out := s.ConfirmExpiry(append([]wire.LeaseSnapshot(nil), due...), wire.ExpiryStats{Leases: 40, Due: len(due)})
			seen := map[string]bool{}
			for _, l := range out {
				if seen[l.Addr] || l.Epoch == 0 {
					t.Errorf("confirmed %+v twice or not due", l)
				}
				seen[l.Addr] = true
			}
			if len(out) > len(due) {
				t.Errorf("confirmed %d of %d due", len(out), len(due))
			}
			scans.Add(1)
		}
	})
	for g := range 2 { // heartbeats
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l := due[g]
				l.Heartbeats = uint64(4 + i)
				if d := s.Threshold(l); d != 0 && (d < DefaultMinThreshold || d > DefaultMaxThreshold) {
					t.Errorf("threshold %v outside the range", d)
				}
				beats.Add(1)
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	for i := range 30 {
		var err error
		switch i % 5 {
		case 0:
			err = s.Activate(HookExpiryConfirm, sp)
		case 1:
			err = s.Activate(HookExpiryThreshold, jitter)
		case 2:
			err = s.Activate(HookExpiryThreshold, sp)
		case 3:
			err = s.Rollback(HookExpiryThreshold)
		case 4:
			err = s.Remove(HookExpiryConfirm)
		}
		if err != nil {
			t.Fatal(err)
		}
		for n := scans.Load() + 3; scans.Load() < n; {
			time.Sleep(time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d scans and %d heartbeats during 30 changes", scans.Load(), beats.Load())
	s.Close()
	sp.Close()
	jitter.Close()
	h.mu.Lock()
	left := len(h.modules)
	h.mu.Unlock()
	if left != 0 {
		t.Errorf("%d modules still loaded after every reference was closed", left)
	}
	if n := len(h.budget); n != 0 {
		t.Errorf("%d instance tokens still taken after every module was destroyed", n)
	}
}
