package wasm

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/edgereg/edgereg/wire"
)

// TestClientZoneCapped: a client's zone is part of the memo key, of every
// memo entry and of every guest input, and the client chooses it; it had
// no cap (a reader's frame may be 1 MiB), so each read with a new 500 KB
// zone cost a guest call and kept 500 KB in the memo. A zone over the cap
// is answered by the route hook's fail mode, as labels over theirs are: a
// fallback, not the module's error, and no guest call.
func TestClientZoneCapped(t *testing.T) {
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{})
	activate(t, s, HookRouteFilter, load(t, h, "fixtures/empty-route.wasm"))
	route := encode(t, zonedRoute())
	zone := strings.Repeat("z", MaxClientZoneBytes+1)
	body, _, err := s.RouteFilter(context.Background(), "10.0.0.1", wire.ClientAttrs{Zone: zone}, "T", 1, route)
	if err != nil || string(body) != string(route) {
		t.Fatalf("zone over the cap: %v, want the unfiltered route", err)
	}
	if st := status(s, HookRouteFilter); st.Fallbacks != 1 || st.Errors != 0 {
		t.Fatalf("status %+v, want 1 fallback and no error", st)
	}
	if _, _, err := s.RouteFilter(context.Background(), "10.0.0.1", wire.ClientAttrs{Zone: zone[1:]}, "T", 1, route); err != nil {
		t.Fatalf("a zone at the cap: %v", err)
	}
	if st := status(s, HookRouteFilter); st.Fallbacks != 1 || st.Calls != 2 {
		t.Fatalf("status %+v after a zone at the cap, want 2 calls and 1 fallback", st)
	}
}

// memoBytes sums what the memo's entries hold.
func memoBytes(m *memo) (entries, bytes int) {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for _, gen := range []map[uint64]*memoEntry{sh.cur, sh.prev} {
			for _, e := range gen {
				entries++
				bytes += e.size()
			}
		}
		sh.mu.Unlock()
	}
	return entries, bytes
}

// TestMemoBoundedInBytes: the memo was bounded in entries only (65,536 in
// each of two generations), and each entry holds the filtered route and
// the client's zone and labels, up to 4 KB that a client chooses; clients
// varying their labels could make it keep 131,072 × (route + 4 KB), over
// 500 MiB. It is bounded in bytes too.
func TestMemoBoundedInBytes(t *testing.T) {
	const budget = 1 << 20
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{MemoBytes: budget})
	activate(t, s, HookRouteFilter, load(t, h, "fixtures/empty-route.wasm"))
	route := encode(t, zonedRoute())
	labels := map[string]string{}
	for i := range MaxClientLabels - 1 {
		labels[fmt.Sprint("k", i)] = strings.Repeat("v", MaxClientLabelBytes-4)
	}
	for i := range 1000 { // ~4 MB of labels, each set new
		labels["n"] = fmt.Sprint(i)
		if _, _, err := s.RouteFilter(context.Background(), "10.0.0.1", wire.ClientAttrs{Labels: labels}, "T", 1, route); err != nil {
			t.Fatal(err)
		}
	}
	entries, bytes := memoBytes(s.memo)
	t.Logf("memo: %d entries, %d KiB", entries, bytes>>10)
	if bytes > 2*budget+64<<10 {
		t.Errorf("the memo holds %d KiB, budget %d KiB (two generations)", bytes>>10, budget>>10)
	}
	if entries == 0 {
		t.Error("the memo holds nothing")
	}
}
