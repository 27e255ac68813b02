package registry

import (
	"fmt"
	"reflect"
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

// wireFreshness is Freshness as the wire carries it, as of now: the
// reference AppendFreshness is checked against.
func wireFreshness(fs []GroupFreshness, now time.Time) []wire.GroupFreshness {
	var out []wire.GroupFreshness
	for _, f := range fs {
		if f.LastHeard.IsZero() {
			continue
		}
		out = append(out, wire.GroupFreshness{BrokerName: f.Name,
			AgeMs: max(now.Sub(f.LastHeard).Milliseconds(), 0), DeadlineInMs: f.Deadline.Sub(now).Milliseconds()})
	}
	return out
}

// TestAppendFreshness: the freshness of routes and named groups is what
// Freshness gives for the routes' topics and those groups, in the wire's
// relative terms, for one route and for many (past the size where groups
// are deduplicated with a map), and a single-route read allocates nothing.
func TestAppendFreshness(t *testing.T) {
	r, clk := newTestRegistry(t)
	var topics []string
	for g := range 40 {
		var ts []string
		for i := range 100 {
			if i%40 == g || (i+1)%40 == g || (i+7)%40 == g {
				ts = append(ts, fmt.Sprintf("t%03d", i))
			}
		}
		mustRegister(t, r, reg("c", fmt.Sprintf("g%02d", g), 0, fmt.Sprintf("10.0.0.%d:1", g), ts...))
		clk.Advance(1500 * time.Microsecond) // ages in ms that truncate
	}
	mustRegister(t, r, reg("c", "g00", 1, "10.0.1.0:1")) // a slave heard later than its master
	for i := range 100 {
		topics = append(topics, fmt.Sprintf("t%03d", i))
	}
	clk.Advance(3 * time.Second)
	now := clk.Now()
	check := func(name string, ts, groups []string) {
		t.Helper()
		var routes []*EncodedRoute
		for _, topic := range ts {
			e, err := r.Route(topic)
			if err != nil {
				t.Fatal(err)
			}
			routes = append(routes, e)
		}
		want := wireFreshness(r.Freshness(ts, groups), now)
		got := r.AppendFreshness(nil, now, routes, groups)
		if !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
	}
	check("one route", topics[:1], nil)
	check("one route and a group", topics[:1], []string{"g05", "no-such-group"})
	check("groups only", nil, []string{"g07", "g03", "g07"})
	check("a few routes", topics[:4], nil)
	check("all routes", topics, []string{"g01"})
	check("nothing", nil, nil)

	e, err := r.Route(topics[3])
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]wire.GroupFreshness, 0, 4)
	routes := []*EncodedRoute{e}
	if allocs := testing.AllocsPerRun(100, func() { r.AppendFreshness(dst[:0], now, routes, nil) }); allocs != 0 {
		t.Errorf("one route's freshness: %v allocs, want 0", allocs)
	}
}

// TestRoutesOf: a batch lookup gives what Route gives for each topic, nil
// for a topic without a route, and allocates nothing once routes are
// cached.
func TestRoutesOf(t *testing.T) {
	r, _ := newTestRegistry(t)
	mustRegister(t, r, reg("c", "a", 0, "10.0.0.1:1", "t1", "t2"))
	mustRegister(t, r, reg("c", "b", 0, "10.0.0.2:1", "t2"))
	topics := []wire.TopicVersion{{Topic: "t2"}, {Topic: "nope"}, {Topic: "t1"}, {Topic: "t2"}}
	routes := make([]*EncodedRoute, len(topics))
	for i := range routes {
		routes[i] = &EncodedRoute{} // overwritten, nil included
	}
	r.RoutesOf(routes, topics)
	for i, tv := range topics {
		want, err := r.Route(tv.Topic)
		if err != nil {
			want = nil
		}
		if routes[i] != want {
			t.Errorf("topic %s: %p, Route gives %p", tv.Topic, routes[i], want)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { r.RoutesOf(routes, topics) }); allocs != 0 {
		t.Errorf("cached routes: %v allocs, want 0", allocs)
	}
}
