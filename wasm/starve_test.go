package wasm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// wearsOut is a route filter whose instances each answer three calls and
// trap on the fourth, and whose _initialize takes ~10 ms: its failures
// discard instances faster than they can be made. (The dry run's
// instance answered its three samples, so it traps on its first real call.)
const wearsOut = `(module ` + abiPrelude + `
  (global $n (mut i32) (i32.const 0))
  (global $sink (mut i32) (i32.const 0))
  (func (export "_initialize") (local i32)
    (loop $l (local.set 0 (i32.add (local.get 0) (i32.const 1)))
      (global.set $sink (local.get 0))
      (br_if $l (i32.lt_u (local.get 0) (i32.const 3000000)))))
  (func (export "edgereg_route_filter") (param i32 i32) (result i64)
    (global.set $n (i32.add (global.get $n) (i32.const 1)))
    (if (i32.ge_u (global.get $n) (i32.const 4)) (then (unreachable)))
    (i64.const 0x0000004000000007)))`

// TestModuleThatWearsOutItsPoolDeactivated: a module failing one call in
// four is under the failure-rate rule (10 of 20), but each failure
// discards an instance that takes its _initialize to replace, so its pool
// was empty nearly all the time and nearly every call fell back as "no
// free instance", which is not counted as the module's failure: 2,385 of
// 2,400 reads fell back, 6 errors were counted, and the module stayed
// active while the pool's refilling took half a core. A call that finds no
// instance because the module's own failures discarded all of them is now
// the module's failure, so the rule deactivates it.
func TestModuleThatWearsOutItsPoolDeactivated(t *testing.T) {
	b := wat(t, wearsOut)
	if b == nil {
		t.Skip("wat2wasm not installed")
	}
	// A generous InitTimeout: the dry run must not fail on a loaded machine.
	h := newHost(t, HostConfig{CallTimeout: 20 * time.Millisecond, InitTimeout: 30 * time.Second})
	m, err := h.Validate(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := newSet(t, h, SetConfig{})
	activate(t, s, HookRouteFilter, m)
	route := encode(t, zonedRoute())
	var calls atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; i < 300 && s.Active(HookRouteFilter); i++ {
				s.RouteFilter(context.Background(), "10.0.0.1", wire.ClientAttrs{}, fmt.Sprint(g, "-", i), 1, route)
				calls.Add(1)
			}
		})
	}
	wg.Wait()
	var st ModuleStats
	for _, ms := range status(s, HookRouteFilter).Modules {
		st = ms
	}
	t.Logf("after %d reads: %d calls, %d errors, %d fallbacks; deactivated: %q", calls.Load(), st.Calls, st.Errors, st.Fallbacks, st.Deactivated)
	if s.Active(HookRouteFilter) {
		t.Fatalf("still active after %d reads, %d of them fallbacks, %d counted as its errors", calls.Load(), st.Fallbacks, st.Errors)
	}
}
