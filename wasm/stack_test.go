package wasm

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// deepButLegal is a route filter that recurses 2,000,000 calls deep, then
// answers an empty route: legal, and it makes wazero grow the call stack to
// tens of MB on every call.
const deepButLegal = `(module ` + abiPrelude + `
  (func $deep (param i32) (result i32) (local i64 i64 i64 i64)
    (if (result i32) (i32.eqz (local.get 0)) (then (i32.const 0))
      (else (call $deep (i32.sub (local.get 0) (i32.const 1))))))
  (func (export "edgereg_route_filter") (param i32 i32) (result i64)
    (drop (call $deep (i32.const 2000000)))
    (i64.const 0x0000004000000007)))`

// TestDeepStacksNotRetained: a grown wazero call stack is not kept by the
// instance that grew it once the call returns, so idle pooled instances
// hold no deep stacks; only calls in flight do, and those are bounded.
func TestDeepStacksNotRetained(t *testing.T) {
	b := wat(t, deepButLegal)
	if b == nil {
		t.Skip("wat2wasm not installed")
	}
	h := newHost(t, HostConfig{PoolSize: 4, MaxConcurrentRouteCalls: 4, CallTimeout: 30 * time.Second}) // -race copies stacks slowly
	s := newSet(t, h, SetConfig{})
	m, err := h.Validate(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	activate(t, s, HookRouteFilter, m)
	route := encode(t, zonedRoute())
	base := liveHeap()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if _, _, err := s.RouteFilter(context.Background(), "10.0.0.1", wire.ClientAttrs{}, fmt.Sprint("T", i), 1, route); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	kept := liveHeap() - base
	st := status(s, HookRouteFilter)
	t.Logf("8 calls 2,000,000 deep on %d live instances: %d answered, %d fallbacks; live heap kept after GC +%d MiB", m.pools[HookRouteFilter].liveCount(), st.Calls-st.Fallbacks, st.Fallbacks, kept>>20)
	if st.Fallbacks != 0 {
		t.Fatalf("status %+v: the deep calls did not answer (deadline?)", st)
	}
	if kept > 32<<20 {
		t.Errorf("idle instances keep +%d MiB of call stacks", kept>>20)
	}
}

// liveHeap is the Go heap in use after a collection: where wazero keeps
// call stacks. (RSS would not do: under -race the detector's shadow memory
// for a freed stack stays resident.)
func liveHeap() int64 {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestTrialsOneAtATime: policy tests run one at a time per host (their
// input is the operator's and may drive a module into deep recursion past
// its dry run); one that cannot start before its deadline is ErrBusy.
func TestTrialsOneAtATime(t *testing.T) {
	h := newHost(t, HostConfig{})
	m := load(t, h, "fixtures/empty-route.wasm")
	in, err := SampleInput(HookRouteFilter)
	if err != nil {
		t.Fatal(err)
	}
	h.trials <- struct{}{} // another trial in progress
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := m.Trial(ctx, HookRouteFilter, in, DefaultMinThreshold, DefaultMaxThreshold); !errors.Is(err, ErrBusy) {
		t.Fatalf("trial while another runs: %v, want ErrBusy", err)
	}
	<-h.trials
	if _, _, err := m.Trial(context.Background(), HookRouteFilter, in, DefaultMinThreshold, DefaultMaxThreshold); err != nil {
		t.Fatalf("trial alone: %v", err)
	}
}

// TestConcurrentRecursionBounded: eight route filter calls that recurse
// without end, started at once (those that wait past the deadline for the
// slot time out), hold at most MaxConcurrentRouteCalls
// wazero stacks at a time, so the RSS peak is that of one such call
// (TestRecursionCost: +300 MiB, +600 MiB under -race), not eight.
func TestConcurrentRecursionBounded(t *testing.T) {
	b := wat(t, recursion)
	if b == nil {
		t.Skip("wat2wasm not installed")
	}
	h := newHost(t, HostConfig{CallTimeout: 10 * time.Second, PoolSize: 8, MaxConcurrentRouteCalls: 1})
	m, err := h.compile(context.Background(), "recursion", b) // the dry run would refuse it
	if err != nil {
		t.Fatal(err)
	}
	defer m.destroy(context.Background())
	route := encode(t, zonedRoute())
	var overflows atomic.Int64
	grew := peakRSS(t, func() {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				_, err := m.FilterRoute(context.Background(), RouteFilterInput{Route: route, Rand: 1})
				switch {
				case errors.Is(err, ErrStackOverflow):
					overflows.Add(1)
				case !errors.Is(err, ErrTimeout): // waited past the deadline for the slot
					t.Errorf("recursion: %v, want a stack overflow or a timeout", err)
				}
			})
		}
		wg.Wait()
	})
	t.Logf("8 unbounded recursions, 1 route-call slot: %d stack overflows, peak RSS +%d MiB", overflows.Load(), grew>>20)
	if overflows.Load() == 0 {
		t.Fatal("no call overflowed the stack")
	}
	// One at a time peaks at ~300 MiB; 8 slots peaked at +1071 MiB. Under
	// -race the detector's shadow memory of each freed stack stays
	// resident, so the peak grows with the number of calls: twice the cap.
	limit := int64(1 << 30)
	if raceSlowdown > 1 {
		limit *= 2
	}
	if grew > limit {
		t.Errorf("8 recursions at once grew the RSS by %d MiB, more than one at a time", grew>>20)
	}
}
