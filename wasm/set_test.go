package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

func activate(t testing.TB, s *Set, h Hook, m *Module) {
	t.Helper()
	if err := s.Activate(h, m); err != nil {
		t.Fatal(err)
	}
}

func status(s *Set, h Hook) Status { return s.List()[h] }

func activeHash(s *Set, h Hook) string {
	if st := status(s, h); st.Active != nil {
		return st.Active.Hash
	}
	return ""
}

// filter runs RouteFilter on zonedRoute for a client in zone east.
func filter(t testing.TB, s *Set, topic string) wire.Route {
	t.Helper()
	route := encode(t, zonedRoute())
	body, _, err := s.RouteFilter(context.Background(), "10.9.9.9", wire.ClientAttrs{Zone: "east"}, topic, 7, route)
	if err != nil {
		t.Fatal(err)
	}
	var r wire.Route
	if err := wire.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestHostileAtRunTime(t *testing.T) {
	tests := []struct {
		file string
		want error
	}{
		{"hostile/loop.wasm", ErrTimeout},
		// Growing to the 16 MiB cap takes wazero longer than this test's
		// 100 ms deadline, so the deadline ends it; TestMemoryCap sees the
		// trap at a small cap.
		{"hostile/grow.wasm", ErrTimeout},
		// (or, when wazero grows fast enough, the trap at the cap)
		{"hostile/trap.wasm", ErrTrap},
		{"hostile/not-cbor.wasm", ErrBadOutput},
		{"hostile/add-broker.wasm", ErrBadOutput},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			h := newHost(t, HostConfig{CallTimeout: 100 * time.Millisecond, PoolSize: 2})
			good, bad := load(t, h, "zone-affinity.wasm"), load(t, h, tt.file)

			// Called directly, the module's failure is reported as such.
			route := encode(t, zonedRoute())
			_, err := bad.FilterRoute(context.Background(), RouteFilterInput{Topic: "T", Route: route, Rand: 1})
			if !errors.Is(err, tt.want) && !(tt.file == "hostile/grow.wasm" && errors.Is(err, ErrTrap)) {
				t.Fatalf("direct call: %v, want %v", err, tt.want)
			}
			if n := bad.pools[HookRouteFilter].liveCount(); n > 2 {
				t.Errorf("%d instances live, pool size is 2", n)
			}

			// Through a Set, each failure falls back to the whole route and
			// is counted; the third in a row restores the last good module.
			s := newSet(t, h, SetConfig{MaxConsecutiveFailures: 3})
			activate(t, s, HookRouteFilter, good)
			filter(t, s, "warm") // a real call: good is now known good
			activate(t, s, HookRouteFilter, bad)
			for i := range 2 {
				if _, brokers := names(filter(t, s, fmt.Sprint("T", i))); len(brokers) != 4 {
					t.Fatalf("call %d: brokers %v, want the unfiltered route", i, brokers)
				}
			}
			if st := status(s, HookRouteFilter); st.Calls != 2 || st.Errors != 2 || st.Fallbacks != 2 {
				t.Errorf("status %+v, want 2 calls, errors and fallbacks", st)
			}
			filter(t, s, "T2")
			if got := activeHash(s, HookRouteFilter); got != good.Hash() {
				t.Fatalf("active %q after 3 failures, want the last good %q", got, good.Hash())
			}
			if _, brokers := names(filter(t, s, "T3")); len(brokers) != 2 {
				t.Errorf("restored policy: brokers %v", brokers)
			}
		})
	}
}

func TestHostileThresholdFallsBack(t *testing.T) {
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{MaxConsecutiveFailures: 100})
	activate(t, s, HookExpiryThreshold, load(t, h, "hostile/not-cbor.wasm"))
	l := lease(10, 30*time.Second)
	for i := range 3 {
		l.Heartbeats++
		if got := s.Threshold(l); got != 0 {
			t.Fatalf("heartbeat %d: threshold %v, want 0 (the registry's default)", i, got)
		}
		waitFor(t, func() bool { return status(s, HookExpiryThreshold).Errors == uint64(i+1) })
	}
}

func TestTimeoutClosesInstance(t *testing.T) {
	h := newHost(t, HostConfig{CallTimeout: 50 * time.Millisecond, PoolSize: 1})
	m := load(t, h, "hostile/loop.wasm")
	start := time.Now()
	_, err := m.FilterRoute(context.Background(), RouteFilterInput{Route: encode(t, zonedRoute()), Rand: 1})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	t.Logf("a looping call ended after %v", time.Since(start))
	// The slot is free again: a new instance serves the dry-run input.
	in, orig, _ := sampleRouteInput()
	if _, _, err := m.filterRoute(context.Background(), &in, &orig); err != nil {
		t.Fatal(err)
	}
}

func TestPoolBoundsInstances(t *testing.T) {
	h := newHost(t, HostConfig{PoolSize: 2, CallTimeout: 300 * time.Millisecond})
	m := load(t, h, "zone-affinity.wasm")
	route := encode(t, zonedRoute())
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 5 {
				in := RouteFilterInput{Client: ClientInfo{Zone: "east"}, Topic: fmt.Sprint(i, j), Route: route}
				if _, err := m.FilterRoute(context.Background(), in); err != nil && !errors.Is(err, ErrBusy) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if n := m.pools[HookRouteFilter].liveCount(); n > 2 {
		t.Errorf("%d live instances, pool size is 2", n)
	}

	// With the only instance stuck, a caller waits no longer than its
	// context and is told the pool was busy, not that the module failed.
	h1 := newHost(t, HostConfig{PoolSize: 1, CallTimeout: 300 * time.Millisecond})
	loop := load(t, h1, "hostile/loop.wasm")
	go loop.FilterRoute(context.Background(), RouteFilterInput{Route: route, Rand: 1})
	rp := loop.pools[HookRouteFilter]
	waitFor(t, func() bool { return rp.liveCount() == 1 && rp.idleCount() == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := loop.FilterRoute(ctx, RouteFilterInput{Route: route, Rand: 1}); !errors.Is(err, ErrBusy) {
		t.Errorf("err = %v, want ErrBusy", err)
	}
}

func TestMemoryCap(t *testing.T) {
	// Go guests declare about 40 pages; a cap under that refuses them.
	h := newHost(t, HostConfig{MaxMemoryPages: 16})
	_, err := h.Validate(context.Background(), testdata(t, "zone-affinity.wasm"))
	if !errors.Is(err, ErrMemory) {
		t.Errorf("err = %v, want ErrMemory", err)
	}
	// A guest growing its memory stops at the cap and traps.
	h = newHost(t, HostConfig{MaxMemoryPages: 8})
	m := load(t, h, "hostile/grow.wasm")
	_, err = m.FilterRoute(context.Background(), RouteFilterInput{Route: encode(t, zonedRoute()), Rand: 1})
	if !errors.Is(err, ErrTrap) {
		t.Errorf("err = %v, want ErrTrap", err)
	}
}

func TestHotSwapFailsNoCall(t *testing.T) {
	h := newHost(t, HostConfig{PoolSize: 2})
	zone, empty := load(t, h, "zone-affinity.wasm"), load(t, h, "fixtures/empty-route.wasm")
	s := newSet(t, h, SetConfig{})
	route := encode(t, zonedRoute())
	var calls atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// A new topic each time: every call reaches a guest.
				_, _, err := s.RouteFilter(context.Background(), "10.0.0.1", wire.ClientAttrs{Zone: "east"}, fmt.Sprint(g, "-", i), 1, route)
				if err != nil {
					t.Error(err)
					return
				}
				calls.Add(1)
			}
		})
	}
	for i := range 30 {
		switch i % 3 {
		case 0:
			activate(t, s, HookRouteFilter, zone)
		case 1:
			activate(t, s, HookRouteFilter, empty)
		case 2:
			if err := s.Remove(HookRouteFilter); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if f := s.fallbacks.Load(); f != 0 {
		t.Errorf("%d of %d calls fell back during hot swaps", f, calls.Load())
	}
	t.Logf("%d calls during 30 swaps", calls.Load())
}

func TestRollback(t *testing.T) {
	h := newHost(t, HostConfig{})
	zone, empty := load(t, h, "zone-affinity.wasm"), load(t, h, "fixtures/empty-route.wasm")
	s := newSet(t, h, SetConfig{})
	if err := s.Rollback(HookRouteFilter); !errors.Is(err, ErrNoLastGood) {
		t.Fatalf("rollback of nothing: %v", err)
	}
	if err := s.Activate(HookExpiryThreshold, zone); !errors.Is(err, ErrHookAbsent) {
		t.Fatalf("activating a route filter as threshold: %v", err)
	}
	activate(t, s, HookRouteFilter, zone)
	activate(t, s, HookRouteFilter, empty)
	steps := []struct {
		do               func(Hook) error
		active, lastGood string
	}{
		{s.Rollback, zone.Hash(), empty.Hash()},
		{s.Rollback, empty.Hash(), zone.Hash()},
		{s.Remove, "", empty.Hash()},
		{s.Rollback, empty.Hash(), ""},
	}
	for i, st := range steps {
		if err := st.do(HookRouteFilter); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got := status(s, HookRouteFilter)
		lg := ""
		if got.LastGood != nil {
			lg = got.LastGood.Hash
		}
		if activeHash(s, HookRouteFilter) != st.active || lg != st.lastGood {
			t.Errorf("step %d: active %.8s last good %.8s, want %.8s and %.8s", i, activeHash(s, HookRouteFilter), lg, st.active, st.lastGood)
		}
	}
	// Modules dropped by the Set are closed once nobody holds them.
	s.Close()
	zone.Close()
	empty.Close()
	if n := len(h.modules); n != 0 {
		t.Errorf("%d modules still loaded", n)
	}
}

func TestRouteFilterMemoized(t *testing.T) {
	h := newHost(t, HostConfig{})
	now := time.Unix(1_700_000_000, 0)
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	s := newSet(t, h, SetConfig{MemoTTL: time.Minute, Now: func() time.Time { return *clock.Load() }})
	route := encode(t, zonedRoute())
	call := func(zone string, labels map[string]string, version uint64) ([]byte, uint64) {
		body, v, err := s.RouteFilter(context.Background(), "10.0.0.1", wire.ClientAttrs{Zone: zone, Labels: labels}, "T", version, route)
		if err != nil {
			t.Fatal(err)
		}
		return body, v
	}
	// No policy: the route as it is.
	if body, v := call("east", nil, 7); !bytes.Equal(body, route) || v != 7 {
		t.Fatal("without a policy the route must pass through")
	}
	activate(t, s, HookRouteFilter, load(t, h, "zone-affinity.wasm"))
	steps := []struct {
		zone    string
		labels  map[string]string
		version uint64
		calls   uint64
	}{
		{"east", map[string]string{"a": "1", "b": "2"}, 7, 1},
		{"east", map[string]string{"b": "2", "a": "1"}, 7, 1}, // equal labels: memoized
		{"west", map[string]string{"a": "1", "b": "2"}, 7, 2},
		{"east", map[string]string{"a": "1"}, 7, 3},
		{"east", map[string]string{"a": "1", "b": "2"}, 8, 4}, // new route version
		{"east", map[string]string{"a": "1", "b": "2"}, 7, 4},
	}
	for i, st := range steps {
		body, v := call(st.zone, st.labels, st.version)
		if v == st.version || v != versionOf(body) {
			t.Errorf("step %d: filtered route has version %d", i, v)
		}
		if got := status(s, HookRouteFilter).Calls; got != st.calls {
			t.Errorf("step %d: %d guest calls, want %d", i, got, st.calls)
		}
	}
	// An answer equal to the route keeps the route's version.
	if _, v := call("", nil, 7); v != 7 {
		t.Errorf("unfiltered answer has version %d, want 7", v)
	}
	later := now.Add(2 * time.Minute)
	clock.Store(&later)
	call("east", map[string]string{"a": "1", "b": "2"}, 7)
	if got := status(s, HookRouteFilter).Calls; got != 6 {
		t.Errorf("after the TTL: %d calls, want 6", got)
	}
}

// waitFor polls cond for up to 10 s: background work has no other signal.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}
