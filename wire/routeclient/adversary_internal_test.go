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
	c := &Client{ctx: ctx, cancel: cancel, log: slog.New(slog.DiscardHandler), cache: make(map[string]*entry), cfg: Config{Fanout: 2}}
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
