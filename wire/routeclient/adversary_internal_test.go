package routeclient

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// TestLyingVersionDoesNotPoison: a node answers route B under route A's
// version (a version is the hash of the route's bytes, PROTOCOL.md 9, so
// this is a lie or a corruption). Had the client taken it, it would cache
// B as A and every honest node would confirm it "not modified" from then
// on: B for good. A result whose version is not its route's must say
// nothing, in reads and in watch pushes alike.
func TestLyingVersionDoesNotPoison(t *testing.T) {
	honest, v := testRoute("a", "b")
	lie, _ := testRoute("a", "b")
	lie.Brokers[1].Addrs = map[int64]string{0: "attacker:10911"}
	honestBody, _ := wire.Marshal(honest)
	lieBody, _ := wire.Marshal(lie)
	held := []heldRoute{{tv: wire.TopicVersion{Topic: "t"}}}
	answer := func(order int, body []byte) reply {
		return reply{order: order, idx: []int{0}, at: time.Now(), rs: wire.Routes{
			Results: []wire.RouteResult{{Topic: "t", Status: wire.StatusOK, Version: v, Route: body}}}}
	}
	addrOfB := func(r wire.Route) string {
		if len(r.Brokers) < 2 {
			return ""
		}
		return r.Brokers[1].Addrs[0]
	}
	ms := mergeReplies(held, []reply{answer(0, lieBody), answer(1, honestBody)})
	if got := addrOfB(ms[0].route); ms[0].status != wire.StatusOK || got != "b:10911" {
		t.Errorf("liar asked first, honest second: b at %q (status %d), want the honest b:10911", got, ms[0].status)
	}
	if ms := mergeReplies(held, []reply{answer(0, lieBody)}); ms[0].status == wire.StatusOK || ms[0].status == wire.StatusNotModified {
		t.Errorf("only the liar answered: status %d with b at %q, want no route", ms[0].status, addrOfB(ms[0].route))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &Client{ctx: ctx, cancel: cancel, log: slog.New(slog.DiscardHandler), cache: make(map[string]*entry), goneAt: make(map[string]uint64), dropped: make(map[string]uint64), cfg: Config{Fanout: 2}}
	h := newWatchHub(c)
	wt := &watchedTopic{fresh: make([]bool, 2), views: make([]slotView, 2), subs: make(map[*subscription]struct{})}
	h.topics["t"] = wt
	h.apply(0, routeEventFrame(t, "t", lie, v))
	if wt.last != nil {
		t.Errorf("a push of B under A's version was delivered: b at %q", addrOfB(wt.last.Route))
	}
	h.apply(1, routeEventFrame(t, "t", honest, v))
	if wt.last == nil || addrOfB(wt.last.Route) != "b:10911" {
		t.Errorf("after the honest push: %+v, want the honest route", wt.last)
	}
}

// TestFreshnessFromTheFutureIsIgnored: a node claims to have heard from
// group b in the future (a negative AgeMs, which no clock gives). For the
// merge, the group's data comes from the node that heard from it last: a
// claim from the future would win over every honest node for as long as
// that answer is held (a watch keeps it until the node's next push). An
// impossible age is no freshness: that node's data for the group comes
// last, as an older node's would.
func TestFreshnessFromTheFutureIsIgnored(t *testing.T) {
	liar, _ := testRoute("a", "b")
	liar.Brokers[1].Addrs = map[int64]string{0: "stale:10911"}
	liarBody, _ := wire.Marshal(liar)
	liarV := wire.RouteVersion(liarBody)
	honest, honestV := testRoute("a", "b")
	now := time.Now()
	a := topicAnswers{views: []view{
		{route: liar, version: liarV, fresh: fresh(-1_000_000_000, 60_000, "a", "b"), at: now, ready: true, order: 0},
		{route: honest, version: honestV, fresh: fresh(10, 60_000, "a", "b"), at: now, ready: true, order: 1},
	}}
	m := a.merge("t", 0)
	if got := m.route.Brokers[1].Addrs[0]; got != "b:10911" {
		t.Errorf("b's data from %q, want the honest node's b:10911", got)
	}
}
