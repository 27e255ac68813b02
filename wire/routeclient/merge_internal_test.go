package routeclient

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

func testRoute(groups ...string) (*wire.Route, uint64) {
	r := &wire.Route{}
	for _, g := range groups {
		r.Queues = append(r.Queues, wire.QueueData{BrokerName: g, ReadQueues: 4, WriteQueues: 4, Perm: 6})
		r.Brokers = append(r.Brokers, wire.BrokerData{Cluster: "c", Name: g, Addrs: map[int64]string{0: g + ":10911"}})
	}
	b, err := wire.Marshal(r)
	if err != nil {
		panic(err)
	}
	return r, wire.RouteVersion(b)
}

func names(r wire.Route) []string {
	var out []string
	for _, q := range r.Queues {
		out = append(out, q.BrokerName)
	}
	return out
}

func fresh(age, deadlineIn int64, groups ...string) map[string]wire.GroupFreshness {
	m := make(map[string]wire.GroupFreshness)
	for _, g := range groups {
		m[g] = wire.GroupFreshness{BrokerName: g, AgeMs: age, DeadlineInMs: deadlineIn}
	}
	return m
}

func TestMergeRule(t *testing.T) {
	full, fullV := testRoute("a", "b", "c")
	part, partV := testRoute("a", "b")
	onlyC, _ := testRoute("c")

	// A partitioned node lacks c; the other holds it live: c stays, and
	// the merged route is byte-equal to the full one (same version).
	a := topicAnswers{views: []view{
		{route: part, version: partV, fresh: fresh(1000, 119000, "a", "b"), ready: true, order: 0},
		{route: full, version: fullV, fresh: fresh(2000, 118000, "a", "b", "c"), ready: true, order: 1},
	}}
	m := a.merge("t", 0)
	if m.status != wire.StatusOK || m.version != fullV || len(m.route.Queues) != 3 {
		t.Errorf("partition: %+v, want the full route (version %x)", m, fullV)
	}
	// Named the full version: not modified, though one node differs.
	if m := a.merge("t", fullV); m.status != wire.StatusNotModified || m.version != fullV {
		t.Errorf("partition, full version named: %+v, want not-modified", m)
	}
	// Two partial views that together make the whole: the union, versioned
	// like the node-built route.
	a = topicAnswers{views: []view{
		{route: part, version: partV, ready: true, order: 0},
		{route: onlyC, version: 7, ready: true, order: 1},
	}}
	if m := a.merge("t", 0); m.version != fullV || len(names(m.route)) != 3 {
		t.Errorf("union of a+b and c: %v (version %x), want a, b, c (version %x)", names(m.route), m.version, fullV)
	}
	// c held only past its deadline (held back by an expiry policy) while
	// a ready node lacks it: gone.
	a = topicAnswers{views: []view{
		{route: part, version: partV, fresh: fresh(1000, 119000, "a", "b"), ready: true, order: 0},
		{route: full, version: fullV, fresh: map[string]wire.GroupFreshness{
			"a": {BrokerName: "a", AgeMs: 1000, DeadlineInMs: 119000}, "b": {BrokerName: "b", AgeMs: 1000, DeadlineInMs: 119000},
			"c": {BrokerName: "c", AgeMs: 130000, DeadlineInMs: -10000}}, ready: true, order: 1},
	}}
	if m := a.merge("t", 0); m.version != partV {
		t.Errorf("held-back group: %v, want a, b", names(m.route))
	}
	// ...but when every ready node holds it back, it stays (the nodes'
	// expiry policy decided so).
	a.views[0] = a.views[1]
	a.views[0].order = 0
	if m := a.merge("t", 0); m.version != fullV {
		t.Errorf("held back everywhere: %v, want a, b, c", names(m.route))
	}
	// A group's data comes from the node that heard from it last, by
	// arrival time minus age: an answer that arrived later with a larger
	// age can still be the fresher.
	newer, _ := testRoute("a", "b", "c")
	newer.Queues[2].WriteQueues = 8
	now := time.Now()
	a = topicAnswers{views: []view{
		{route: full, version: fullV, fresh: fresh(100, 115000, "a", "b", "c"), at: now.Add(-10 * time.Second), ready: true, order: 0},
		{route: newer, version: 9, fresh: fresh(5000, 119900, "a", "b", "c"), at: now, ready: true, order: 1},
	}}
	if m := a.merge("t", 0); m.route.Queues[2].WriteQueues != 8 {
		t.Errorf("freshest source: %+v, want c's data from the node that heard from it last", m.route.Queues[2])
	}
	// Not found: final only with no route from anyone; warming nodes say
	// nothing.
	if m := (&topicAnswers{readyNotFound: 1, warming: 1}).merge("t", 0); m.status != wire.StatusNotFound {
		t.Errorf("ready not-found and warming: %+v, want not-found", m)
	}
	if m := (&topicAnswers{warming: 2}).merge("t", 0); m.status != wire.StatusWarmingUp {
		t.Errorf("only warming: %+v, want warming-up", m)
	}
	a = topicAnswers{readyNotFound: 1, views: []view{{route: full, version: fullV, ready: false, order: 1}}}
	if m := a.merge("t", 0); m.status != wire.StatusOK || m.version != fullV {
		t.Errorf("not-found from a ready node, a route from a warming one: %+v, want the route", m)
	}
}

// TestAbsorbLate: an answer that arrives after its read returned on
// MergeWait is merged with the answers the read used, and fixes the cached
// route the read stored, unless a newer route replaced it meanwhile.
func TestAbsorbLate(t *testing.T) {
	part, partV := testRoute("a", "b")
	full, fullV := testRoute("a", "b", "c")
	partBody, _ := wire.Marshal(part)
	fullBody, _ := wire.Marshal(full)
	for _, replaced := range []bool{false, true} {
		c := &Client{cache: make(map[string]*entry), goneAt: make(map[string]uint64), dropped: make(map[string]uint64)}
		held := []heldRoute{{tv: wire.TopicVersion{Topic: "t"}}}
		got := []reply{{order: 0, idx: []int{0}, at: time.Now(), rs: wire.Routes{
			Results: []wire.RouteResult{{Topic: "t", Status: wire.StatusOK, Version: partV, Route: partBody}}}}}
		first := mergeReplies(held, got)
		c.cache["t"] = &entry{route: first[0].route, version: first[0].version}
		if replaced {
			c.cache["t"] = &entry{version: 42} // a watch pushed a newer route meanwhile
		}
		replies := make(chan reply, 1)
		replies <- reply{order: 1, idx: []int{0}, at: time.Now(), rs: wire.Routes{
			Results: []wire.RouteResult{{Topic: "t", Status: wire.StatusOK, Version: fullV, Route: fullBody}}}}
		done := make(chan struct{})
		if !c.absorbLate(held, asOf{}, got, first, replies, 1, func() { close(done) }) {
			t.Fatal("absorbLate did not take over")
		}
		c.wg.Wait()
		<-done
		switch e := c.cache["t"]; {
		case replaced && e.version != 42:
			t.Errorf("a newer cached route was overwritten by a late answer: %+v", e)
		case !replaced && (e.version != fullV || len(e.route.Queues) != 3):
			t.Errorf("after the late answer the cache holds %v (version %x), want a, b, c (%x)", names(e.route), e.version, fullV)
		}
	}
}

// TestMergeIgnoresAnswersForOtherTopics: a node that answers garbage, here
// results naming other topics than asked (or out of order), must not have
// them merged as the asked topics' routes. Before, the merge trusted the
// position alone and served topic x's route as topic t's.
func TestMergeIgnoresAnswersForOtherTopics(t *testing.T) {
	xRoute, xV := testRoute("x")
	body, err := wire.Marshal(xRoute)
	if err != nil {
		t.Fatal(err)
	}
	held := []heldRoute{{tv: wire.TopicVersion{Topic: "t"}}}
	bad := reply{order: 0, idx: []int{0}, at: time.Now(), rs: wire.Routes{Results: []wire.RouteResult{
		{Topic: "x", Status: wire.StatusOK, Version: xV, Route: body},
	}}}
	notFound := reply{order: 1, idx: []int{0}, at: time.Now(), rs: wire.Routes{Results: []wire.RouteResult{
		{Topic: "t", Status: wire.StatusNotFound},
	}}}
	ms := mergeReplies(held, []reply{bad, notFound})
	if ms[0].status != wire.StatusNotFound {
		t.Errorf("t answered with x's route by one node and not-found by another: %+v, want not-found", ms[0])
	}
	ms = mergeReplies(held, []reply{bad})
	if ms[0].status == wire.StatusOK || ms[0].status == wire.StatusNotModified {
		t.Errorf("t answered only with x's route: %+v, want no route", ms[0])
	}
}

func routeEventFrame(t *testing.T, topic string, r *wire.Route, v uint64, fs ...wire.GroupFreshness) *wire.Frame {
	t.Helper()
	body, err := wire.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	ev := wire.RouteEvent{Result: wire.RouteResult{Topic: topic, Status: wire.StatusOK, Version: v, Route: body}, Groups: fs}
	b, err := wire.Marshal(&ev)
	if err != nil {
		t.Fatal(err)
	}
	return &wire.Frame{Type: wire.TypeRouteEvent, Body: b}
}

// TestWatchLosesNoFinalVersionWhenAStreamBreaks: broker group c dies. Node
// 0 expires it and pushes the final route (a, b); node 1 still held c live
// when its stream broke, before it could push. A stream that broke is no
// witness for ever: once c's lease would have run out on node 1 too (its
// last age plus time to deadline), the merged route drops c and the
// subscribers get the final version even if node 1 never comes back.
// Before, the broken slot's view was dropped without a merge, and the
// merged route kept the dead group until that slot reconnected.
func TestWatchLosesNoFinalVersionWhenAStreamBreaks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &Client{ctx: ctx, cancel: cancel, log: slog.New(slog.DiscardHandler), cache: make(map[string]*entry), goneAt: make(map[string]uint64), dropped: make(map[string]uint64), cfg: Config{Fanout: 2}}
	h := newWatchHub(c)
	wt := &watchedTopic{fresh: make([]bool, 2), views: make([]slotView, 2), subs: make(map[*subscription]struct{})}
	h.topics["t"] = wt
	full, fullV := testRoute("a", "b", "c")
	part, partV := testRoute("a", "b")
	live := func(g string, deadlineIn int64) wire.GroupFreshness {
		return wire.GroupFreshness{BrokerName: g, AgeMs: 10, DeadlineInMs: deadlineIn}
	}
	h.apply(0, routeEventFrame(t, "t", full, fullV, live("a", 60_000), live("b", 60_000), live("c", 300)))
	h.apply(1, routeEventFrame(t, "t", full, fullV, live("a", 60_000), live("b", 60_000), live("c", 300)))
	h.apply(0, routeEventFrame(t, "t", part, partV, live("a", 60_000), live("b", 60_000)))
	version := func() uint64 {
		h.mu.Lock()
		defer h.mu.Unlock()
		return wt.version
	}
	if v := version(); v != fullV {
		t.Fatalf("node 1 still holds c live: merged version %x, want the full route's %x", v, fullV)
	}
	h.forget(1) // node 1's stream breaks for good
	deadline := time.Now().Add(10 * time.Second)
	for version() != partV && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if v := version(); v != partV {
		t.Fatalf("merged version %x after node 1's stream broke and c's lease ran out there, want the final route's %x", v, partV)
	}
}
