package routeclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/routeclient"
)

// next returns the next update, failing the test if none comes in time.
func next(t testing.TB, ch <-chan routeclient.Update) routeclient.Update {
	t.Helper()
	select {
	case u, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("no update")
	}
	return routeclient.Update{}
}

// until returns the first update that satisfies cond, skipping others.
func until(t testing.TB, ch <-chan routeclient.Update, what string, cond func(routeclient.Update) bool) routeclient.Update {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case u, ok := <-ch:
			if !ok {
				t.Fatalf("watch channel closed waiting for %s", what)
			}
			if cond(u) {
				return u
			}
		case <-deadline:
			t.Fatalf("no update with %s", what)
		}
	}
}

func writeQueues(u routeclient.Update) uint32 {
	if u.Gone || len(u.Route.Queues) == 0 {
		return 0
	}
	return u.Route.Queues[0].WriteQueues
}

func TestWatchPushesChanges(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, withAdmin)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	c := newClient(t, ca, nodes.Static(tn.Addr()), nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch, err := c.Watch(ctx, "orders", "later")
	if err != nil {
		t.Fatal(err)
	}
	u := next(t, ch)
	if u.Topic != "orders" || u.Gone || len(u.Route.Brokers) != 1 || u.Version == 0 {
		t.Fatalf("first update %+v", u)
	}
	register(t, tn, "b2", "10.0.0.2:10911", 4, "orders")
	if u = next(t, ch); u.Topic != "orders" || len(u.Route.Brokers) != 2 {
		t.Fatalf("update after a second broker: %+v", u)
	}
	// A topic that did not exist when watched is pushed when it appears.
	register(t, tn, "b3", "10.0.0.3:10911", 4, "later")
	if u = next(t, ch); u.Topic != "later" || u.Gone {
		t.Fatalf("update for a new topic: %+v", u)
	}
	unregister(t, tn, "10.0.0.1:10911")
	unregister(t, tn, "10.0.0.2:10911")
	// The state between the two unregisters (b2 alone) is real and may be
	// pushed first if the push runs between them; then "gone" follows.
	u = next(t, ch)
	if u.Topic == "orders" && !u.Gone && len(u.Route.Brokers) == 1 && u.Route.Brokers[0].Name == "b2" {
		u = next(t, ch)
	}
	if u.Topic != "orders" || !u.Gone || u.Version != 0 {
		t.Fatalf("update after every broker left: %+v", u)
	}
	// The pushed routes feed the cache: no query needed.
	route, _, err := c.Route(ctx, "later")
	if err != nil || len(route.Brokers) != 1 || c.Stats().Queries != 0 {
		t.Fatalf("cached route from a push: %+v, %v, stats %+v", route, err, c.Stats())
	}
	// A second watch of a topic gets its current state at once.
	ch2, err := c.Watch(ctx, "later")
	if err != nil {
		t.Fatal(err)
	}
	if u = next(t, ch2); u.Topic != "later" || u.Gone {
		t.Fatalf("joining watch: %+v", u)
	}
	cancel()
	for range ch {
	}
	for range ch2 {
	}
	waitFor(t, "the node to drop the watch stream", func() bool { return metric(t, tn, "edgereg_watch_streams") == 0 })
}

func TestWatchResumesAfterNodeRestart(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	c := newClient(t, ca, nodes.Static(tn.Addr()), nil)
	ch, err := c.Watch(ctxT(t), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if u := next(t, ch); writeQueues(u) != 4 {
		t.Fatalf("first update %+v", u)
	}
	// The node restarts and the broker comes back with another
	// configuration while the client is away: the client resumes naming
	// the version it holds and gets the new route.
	tn.Stop()
	tn.Start()
	register(t, tn, "b1", "10.0.0.1:10911", 16, "orders")
	u := until(t, ch, "the changed route", func(u routeclient.Update) bool { return writeQueues(u) == 16 })
	if u.Topic != "orders" {
		t.Fatalf("update %+v", u)
	}
	if s := c.Stats(); s.WatchStreams < 2 {
		t.Errorf("stats %+v: want a resumed stream", s)
	}
	// The resumed stream carries later changes too.
	register(t, tn, "b2", "10.0.0.2:10911", 16, "orders")
	until(t, ch, "the second broker", func(u routeclient.Update) bool { return len(u.Route.Brokers) == 2 })
}

func TestWatchSwitchesNodeWithoutMissingAChange(t *testing.T) {
	ca := newTestCA(t)
	tns := sortedNodes(t, ca, 2, nil)
	for _, tn := range tns {
		register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	}
	// One stream, so that it has to switch (with a fan-out of 2 the other
	// node's stream carries the change; TestWatchMergesTwoNodes).
	c := newClient(t, ca, nodes.Static(addrsOf(tns)...), func(cfg *routeclient.Config) { cfg.Fanout = 1 })
	ch, err := c.Watch(ctxT(t), "orders")
	if err != nil {
		t.Fatal(err)
	}
	first := next(t, ch)
	// The watched node (the first in order) goes away; the route changes
	// on the other node before the client resumes there.
	tns[0].Stop()
	register(t, tns[1], "b2", "10.0.0.2:10911", 4, "orders")
	u := until(t, ch, "the change made while switching", func(u routeclient.Update) bool { return len(u.Route.Brokers) == 2 })
	if u.Version == first.Version {
		t.Fatalf("same version %d after a change", u.Version)
	}
	if s := c.Stats(); s.WatchStreams < 2 {
		t.Errorf("stats %+v: want a resumed stream", s)
	}
}

func TestWatchEndsWithItsContext(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, withAdmin)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	c := newClient(t, ca, nodes.Static(tn.Addr()), nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	ch, err := c.Watch(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch)
	if n := metric(t, tn, "edgereg_watch_streams"); n != 1 {
		t.Fatalf("%d watch streams on the node, want 1", n)
	}
	cancel()
	for range ch {
	}
	waitFor(t, "the watch stream to close", func() bool { return metric(t, tn, "edgereg_watch_streams") == 0 })
	// Watching again opens a new stream.
	ch, err = c.Watch(ctxT(t), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if u := next(t, ch); u.Topic != "orders" {
		t.Fatalf("update %+v", u)
	}
	c.Close()
	if _, ok := <-ch; ok {
		t.Fatal("watch channel open after Close")
	}
}
