package wasm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// TestRouteFailureModes: a route filter that traps answers by the hook's
// fail mode, counted as a fallback either way: open serves the unfiltered
// route, closed no route and ErrFailedClosed — never an empty route.
func TestRouteFailureModes(t *testing.T) {
	route := encode(t, zonedRoute())
	for _, mode := range []FailMode{FailDefault, FailOpen, FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			h := newHost(t, HostConfig{})
			s := newSet(t, h, SetConfig{RouteFailure: mode, MaxConsecutiveFailures: 100, MaxWindowFailures: 100})
			activate(t, s, HookRouteFilter, load(t, h, "hostile/trap.wasm"))
			body, v, err := s.RouteFilter(context.Background(), "10.0.0.1", wire.ClientAttrs{}, "T", 7, route)
			labels := map[string]string{}
			for i := range MaxClientLabels + 1 {
				labels[fmt.Sprint("k", i)] = "v"
			}
			lbody, _, lerr := s.RouteFilter(context.Background(), "10.0.0.1", wire.ClientAttrs{Labels: labels}, "T", 7, route)
			if mode == FailClosed {
				if !errors.Is(err, ErrFailedClosed) || !errors.Is(err, ErrTrap) || body != nil || v != 0 {
					t.Fatalf("fail-closed trap: %d bytes, version %d, %v; want no route and ErrFailedClosed", len(body), v, err)
				}
				if !errors.Is(lerr, ErrFailedClosed) || lbody != nil {
					t.Fatalf("fail-closed, labels over the cap: %d bytes, %v; want no route", len(lbody), lerr)
				}
			} else {
				if err != nil || string(body) != string(route) || v != 7 {
					t.Fatalf("fail-open trap: %v, version %d; want the unfiltered route", err, v)
				}
				if lerr != nil || string(lbody) != string(route) {
					t.Fatalf("fail-open, labels over the cap: %v; want the unfiltered route", lerr)
				}
			}
			if st := status(s, HookRouteFilter); st.Fallbacks != 2 || st.Errors != 1 {
				t.Fatalf("status %+v, want 2 fallbacks (trap, labels) and 1 error (the trap)", st)
			}
		})
	}
}

// TestConfirmFailureModes: a confirm hook that traps holds every due lease
// back when it fails closed (the default) and removes them all when it
// fails open; counted as a fallback either way.
func TestConfirmFailureModes(t *testing.T) {
	due := []wire.LeaseSnapshot{{Cluster: "C", Addr: "10.0.0.1:1", Epoch: 1}, {Cluster: "C", Addr: "10.0.0.2:1", Epoch: 1}}
	for _, tt := range []struct {
		mode    FailMode
		removed int
	}{{FailDefault, 0}, {FailClosed, 0}, {FailOpen, 2}} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			h := newHost(t, HostConfig{})
			s := newSet(t, h, SetConfig{ConfirmFailure: tt.mode, MaxConsecutiveFailures: 100, MaxWindowFailures: 100})
			activate(t, s, HookExpiryConfirm, load(t, h, "hostile/trap-confirm.wasm"))
			if got := s.ConfirmExpiry(due, wire.ExpiryStats{Leases: 10, Due: 2}); len(got) != tt.removed {
				t.Fatalf("fail mode %s: %d of 2 due leases removed, want %d", tt.mode, len(got), tt.removed)
			}
			if st := status(s, HookExpiryConfirm); st.Fallbacks != 1 || st.Errors != 1 {
				t.Fatalf("status %+v, want 1 fallback and 1 error", st)
			}
		})
	}
}

// TestReadBudget: under a spent read budget no guest call starts; each
// topic is answered by the fail mode and counted as a fallback, not as the
// module's error. Memoized answers are still served.
func TestReadBudget(t *testing.T) {
	route := encode(t, zonedRoute())
	for _, mode := range []FailMode{FailOpen, FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			h := newHost(t, HostConfig{})
			s := newSet(t, h, SetConfig{RouteFailure: mode})
			activate(t, s, HookRouteFilter, load(t, h, "fixtures/empty-route.wasm"))
			ample := WithReadBudget(context.Background(), time.Hour)
			memoized, _, err := s.RouteFilter(ample, "10.0.0.1", wire.ClientAttrs{}, "memoized", 1, route)
			if err != nil || string(memoized) == string(route) {
				t.Fatalf("within the budget: %v, want the policy's answer", err)
			}
			spent := WithReadBudget(context.Background(), 0)
			for i := range 50 {
				body, _, err := s.RouteFilter(spent, "10.0.0.1", wire.ClientAttrs{}, fmt.Sprint("T", i), 1, route)
				switch {
				case mode == FailOpen && (err != nil || string(body) != string(route)):
					t.Fatalf("topic %d past the budget, fail-open: %v, want the unfiltered route", i, err)
				case mode == FailClosed && (!errors.Is(err, ErrFailedClosed) || !errors.Is(err, ErrBudget) || body != nil):
					t.Fatalf("topic %d past the budget, fail-closed: %d bytes, %v, want no route", i, len(body), err)
				}
			}
			if body, _, err := s.RouteFilter(spent, "10.0.0.1", wire.ClientAttrs{}, "memoized", 1, route); err != nil || string(body) != string(memoized) {
				t.Fatalf("memoized topic past the budget: %v, want the memoized answer", err)
			}
			if st := status(s, HookRouteFilter); st.Fallbacks != 50 || st.Errors != 0 || st.Calls != 51 {
				t.Fatalf("status %+v, want 51 calls: 1 answered, 50 fallbacks, no error", st)
			}
		})
	}
}
