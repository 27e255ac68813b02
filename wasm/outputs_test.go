package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// TestOutputsThatHideEverythingRefused: a route filter answering no route
// ({} or only unknown keys) and thresholds outside the documented range
// fail the dry run, so the upload is refused; before, they were accepted
// and every client got an empty route, or the threshold was clamped.
func TestOutputsThatHideEverythingRefused(t *testing.T) {
	h := newHost(t, HostConfig{})
	for _, tc := range []struct{ file, want string }{
		{"hostile/route-no-key.wasm", "no route"},
		{"hostile/route-unknown-key.wasm", "no route"},
		{"hostile/threshold-1ms.wasm", "outside"},
		{"hostile/threshold-max-int64.wasm", "outside"},
		{"hostile/threshold-2p32.wasm", "outside"},
	} {
		m, err := h.Validate(context.Background(), testdata(t, tc.file))
		if m != nil {
			m.Close()
		}
		if !errors.Is(err, ErrDryRun) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want a dry-run refusal saying %q", tc.file, err, tc.want)
		}
	}
}

// TestAlternatingFailuresDeactivated: a module that fails every other
// call never fails five times in a row; the failure-rate rule (10 of the
// last 20 calls) deactivates it anyway.
func TestAlternatingFailuresDeactivated(t *testing.T) {
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{})
	activate(t, s, HookRouteFilter, load(t, h, "hostile/alternate.wasm"))
	for i := range 40 {
		if activeHash(s, HookRouteFilter) == "" {
			t.Logf("deactivated after %d calls", i)
			return
		}
		filter(t, s, fmt.Sprint("T", i))
	}
	st := status(s, HookRouteFilter)
	t.Fatalf("still active after 40 calls with %d errors", st.Errors)
}

// TestRestoreNeedsAModuleThatWorked: when the active module is
// deactivated, the last module is restored only if it answered real calls
// well; one that failed every call of its own gives way to the built-in
// behaviour.
func TestRestoreNeedsAModuleThatWorked(t *testing.T) {
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{MaxConsecutiveFailures: 3})
	trap, bad := load(t, h, "hostile/trap.wasm"), load(t, h, "hostile/not-cbor.wasm")
	activate(t, s, HookRouteFilter, trap)
	filter(t, s, "a")
	filter(t, s, "b") // trap failed both its calls
	activate(t, s, HookRouteFilter, bad)
	for i := range 3 {
		filter(t, s, fmt.Sprint("T", i))
	}
	if got := activeHash(s, HookRouteFilter); got != "" {
		t.Fatalf("active %.12s after the deactivation, want the built-in behaviour (the last module never worked)", got)
	}
}

// TestCountersSurviveReactivation: a hook's counters are the module's
// over all its activations, so they never go backwards when an operator
// swaps modules back and forth, and the replaced module's counts stay
// listed.
func TestCountersSurviveReactivation(t *testing.T) {
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{})
	zone, empty := load(t, h, "zone-affinity.wasm"), load(t, h, "fixtures/empty-route.wasm")
	activate(t, s, HookRouteFilter, zone)
	for i := range 3 {
		filter(t, s, fmt.Sprint("T", i))
	}
	activate(t, s, HookRouteFilter, empty)
	filter(t, s, "E")
	activate(t, s, HookRouteFilter, zone)
	filter(t, s, "T9")
	st := status(s, HookRouteFilter)
	if st.Calls != 4 {
		t.Fatalf("zone-affinity calls after reactivation = %d, want 4 (3 before, 1 after)", st.Calls)
	}
	if len(st.Modules) != 2 || st.Modules[0].Hash != empty.Hash() || st.Modules[0].Calls != 1 || st.Modules[0].State != "last_good" {
		t.Fatalf("modules %+v, want the empty-route module with its 1 call as last good", st.Modules)
	}
	if got := st.Modules[1].Times.Count; got != 4 {
		t.Errorf("histogram count %d, want 4", got)
	}
}

// TestGuestOutputCounted: what guests write to stdout and stderr is
// discarded and counted.
func TestGuestOutputCounted(t *testing.T) {
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{})
	activate(t, s, HookRouteFilter, load(t, h, "hostile/stdout.wasm"))
	before := h.GuestOutputBytes() // the dry run writes too
	filter(t, s, "T")
	if got := h.GuestOutputBytes() - before; got != 2*256<<10 {
		t.Fatalf("guest output counted %d bytes, want %d", got, 2*256<<10)
	}
}

// TestClientLabelsCapped: labels over the caps are not passed to the
// guest; the read gets the unfiltered route and a fallback is counted.
func TestClientLabelsCapped(t *testing.T) {
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{})
	activate(t, s, HookRouteFilter, load(t, h, "fixtures/empty-route.wasm"))
	route := encode(t, zonedRoute())
	labels := map[string]string{}
	for i := range MaxClientLabels + 1 {
		labels[fmt.Sprint("k", i)] = "v"
	}
	for _, ls := range []map[string]string{labels, {"k": strings.Repeat("v", MaxClientLabelBytes)}} {
		body, _, err := s.RouteFilter(context.Background(), "10.0.0.1", wire.ClientAttrs{Labels: ls}, "T", 1, route)
		if err != nil || string(body) != string(route) {
			t.Fatalf("labels over the cap: %v, want the unfiltered route", err)
		}
	}
	if st := status(s, HookRouteFilter); st.Fallbacks != 2 || st.Errors != 0 {
		t.Fatalf("status %+v, want 2 fallbacks and no error", st)
	}
}

// TestJSONInputsAndOutputs: each hook's input written as JSON with ABI.md's
// names runs, and the output prints with ABI.md's names.
func TestJSONInputsAndOutputs(t *testing.T) {
	h := newHost(t, HostConfig{})
	inputs := map[Hook]string{
		HookRouteFilter: `{"client": {"zone": "east"}, "topic": "T", "now_ms": 1, "rand": 18446744073709551615,
			"route": {"queues": [{"broker_name": "a", "read_queues": 4, "write_queues": 4, "perm": 6}],
			          "brokers": [{"cluster": "C", "name": "a", "zone": "east", "addresses": {"0": "10.0.0.1:1"}}]}}`,
		HookExpiryThreshold: `{"broker": {"cluster": "C", "name": "a", "id": 0, "addr": "10.0.0.1:1"},
			"stats": {"heartbeats": 3, "intervals_ms": [30000], "jitter_ms": 2500}, "default_ms": 120000}`,
		HookExpiryConfirm: `{"due": [{"cluster": "C", "addr": "10.0.0.1:1", "name": "a", "epoch": 3}],
			"stats": {"leases": 10, "due": 1, "heartbeat_success_permille": 1000}}`,
	}
	want := map[Hook]string{
		HookRouteFilter:     `{"route":{"queues":[{"broker_name":"a","read_queues":4,"write_queues":4,"perm":6,"sys_flag":0}],"brokers":[{"cluster":"C","name":"a","zone":"east","addresses":{"0":"10.0.0.1:1"}}]}}`,
		HookExpiryThreshold: `{"threshold_ms":130000}`,
		HookExpiryConfirm:   `{"remove":[0]}`,
	}
	mods := map[Hook]*Module{HookRouteFilter: load(t, h, "zone-affinity.wasm"),
		HookExpiryThreshold: load(t, h, "jitter-threshold.wasm"), HookExpiryConfirm: load(t, h, "self-preservation.wasm")}
	for _, hk := range Hooks {
		in, err := InputFromJSON(hk, []byte(inputs[hk]))
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := mods[hk].Trial(context.Background(), hk, in, DefaultMinThreshold, DefaultMaxThreshold)
		if err != nil {
			t.Fatalf("%s: %v", hk, err)
		}
		v, err := OutputJSON(hk, out)
		if err != nil {
			t.Fatal(err)
		}
		js, _ := json.Marshal(v)
		if string(js) != want[hk] {
			t.Errorf("%s: output %s, want %s", hk, js, want[hk])
		}
	}
	if _, err := InputFromJSON(HookExpiryThreshold, []byte(`{"defualt_ms": 1}`)); err == nil || !strings.Contains(err.Error(), "defualt_ms") {
		t.Errorf("a misspelt field: %v, want an error naming it", err)
	}
}

// TestRouteFloodDoesNotStarveConfirm: a module serving both hooks whose
// route calls all run to their deadline, flooded by readers, still answers
// every expiry confirmation: the confirm hook has its own instances and
// route calls are bounded on their own. Before, the flood took every
// instance and the confirmations fell back to "remove all due".
func TestRouteFloodDoesNotStarveConfirm(t *testing.T) {
	h := newHost(t, HostConfig{CallTimeout: 50 * time.Millisecond})
	// Fail-open, so a confirmation that fell back would remove the lease.
	s := newSet(t, h, SetConfig{MaxConsecutiveFailures: 1 << 30, MaxWindowFailures: 1 << 30, FailureWindow: 1, ConfirmFailure: FailOpen})
	m := load(t, h, "hostile/slow-route-confirm.wasm")
	activate(t, s, HookRouteFilter, m)
	activate(t, s, HookExpiryConfirm, m)
	route := encode(t, zonedRoute())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				s.RouteFilter(context.Background(), "10.0.0.1", wire.ClientAttrs{}, fmt.Sprint("T", i, j), 1, route)
			}
		})
	}
	waitFor(t, func() bool { return status(s, HookRouteFilter).Calls > 8 })
	due := []wire.LeaseSnapshot{{Cluster: "C", Addr: "10.0.0.9:1", Epoch: 1}}
	for i := range 20 {
		if got := s.ConfirmExpiry(due, wire.ExpiryStats{Leases: 10, Due: 1}); len(got) != 0 {
			t.Errorf("confirmation %d removed %d leases: it fell back while route reads flooded the module", i, len(got))
		}
	}
	close(stop)
	wg.Wait()
	if st := status(s, HookExpiryConfirm); st.Fallbacks != 0 {
		t.Errorf("confirm status %+v, want no fallback", st)
	}
}
