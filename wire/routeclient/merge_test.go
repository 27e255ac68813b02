package routeclient_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/routeclient"
)

// TestReadsMergeTwoNodes: the first node lacks a broker group (as a node cut
// off from it would); the client sees it anyway, with the version the full
// node gives, keeps being answered not-modified, and gets not-found only for
// a topic neither node holds.
func TestReadsMergeTwoNodes(t *testing.T) {
	ca := newTestCA(t)
	tns := sortedNodes(t, ca, 2, nil) // tns[0] is asked first
	for _, tn := range tns {
		register(t, tn, "b1", "10.0.0.1:10911", 4, "t1")
	}
	register(t, tns[1], "b2", "10.0.0.2:10911", 4, "t1", "only-on-1")
	// Wait for both answers whatever the dial times: the test is about
	// the merge, not the hedge.
	c := newClient(t, ca, nodes.Static(addrsOf(tns)...), func(cfg *routeclient.Config) { cfg.MergeWait = time.Minute })
	ctx := ctxT(t)

	route, version, err := c.Route(ctx, "t1")
	if err != nil || len(route.Brokers) != 2 {
		t.Fatalf("route of t1: %d groups, %v; want both", len(route.Brokers), err)
	}
	e, err := tns[1].Node().Registry().Route("t1")
	if err != nil || version != e.Version {
		t.Fatalf("merged version %x, the full node's is %x (%v)", version, e.Version, err)
	}
	if _, _, err := c.Route(ctx, "only-on-1"); err != nil {
		t.Errorf("a topic only the second node holds: %v", err)
	}
	if _, _, err := c.Route(ctx, "nowhere"); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("a topic no node holds: %v, want not found", err)
	}
	before := c.Stats()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.NotModified-before.NotModified != 2 || st.Updated != before.Updated || st.Refreshes-before.Refreshes != 2 {
		t.Errorf("refresh: %+v then %+v: want both topics not modified, one request to each node", before, st)
	}
	if _, v, _ := c.Route(ctx, "t1"); v != version {
		t.Errorf("version after refresh %x, want %x", v, version)
	}
	// The full node loses b2 for good (unregistered): the merged route
	// loses it too.
	unregister(t, tns[1], "10.0.0.2:10911")
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if route, _, _ := c.Route(ctx, "t1"); len(route.Brokers) != 1 {
		t.Errorf("after b2 left every node: %d groups, want 1", len(route.Brokers))
	}
}

// TestSilentNodeDoesNotHoldUpReads: one of the two nodes asked never
// answers; reads are answered by the other long before the silent one's
// request timeout.
func TestSilentNodeDoesNotHoldUpReads(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "t1")
	hole, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hole.Close() })
	c := newClient(t, ca, nodes.Static(hole.LocalAddr().String(), tn.Addr()), func(cfg *routeclient.Config) {
		cfg.RequestTimeout = time.Minute
	})
	for _, topic := range []string{"t1", "t1"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, _, err := c.Route(ctx, topic)
		cancel()
		if err != nil {
			t.Fatalf("route with one of two nodes silent (its timeout 1m, the read's 20 s): %v", err)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := c.Refresh(rctx); err != nil { // not held up either
			t.Errorf("refresh with one of two nodes silent: %v", err)
		}
		rcancel()
	}
}

// TestWatchMergesTwoNodes: a watch keeps a stream to each of two nodes and
// delivers the merged route: a group the first node lacks is there, a
// change on either node arrives, and a group leaves only when it leaves
// both.
func TestWatchMergesTwoNodes(t *testing.T) {
	ca := newTestCA(t)
	tns := sortedNodes(t, ca, 2, nil)
	for _, tn := range tns {
		register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	}
	register(t, tns[1], "b2", "10.0.0.2:10911", 4, "orders") // tns[0] is cut off from b2
	c := newClient(t, ca, nodes.Static(addrsOf(tns)...), nil)
	ch, err := c.Watch(ctxT(t), "orders")
	if err != nil {
		t.Fatal(err)
	}
	until(t, ch, "both groups", func(u routeclient.Update) bool { return len(u.Route.Brokers) == 2 })
	waitFor(t, "a stream to each node", func() bool { return c.Stats().WatchStreams == 2 })
	// b1 scales out, as both nodes see.
	for _, tn := range tns {
		register(t, tn, "b1", "10.0.0.1:10911", 8, "orders")
	}
	u := until(t, ch, "b1 with 8 write queues", func(u routeclient.Update) bool {
		return len(u.Route.Queues) == 2 && u.Route.Queues[0].WriteQueues == 8
	})
	e, err := tns[1].Node().Registry().Route("orders")
	if err != nil || u.Version != e.Version {
		t.Errorf("merged version %x, the full node's %x (%v)", u.Version, e.Version, err)
	}
	// b2 leaves the only node that had it: gone from the merged route.
	unregister(t, tns[1], "10.0.0.2:10911")
	until(t, ch, "b2 gone", func(u routeclient.Update) bool { return len(u.Route.Brokers) == 1 })
}

// TestLateAnswersReachTheCache: a read that returns on its first answer
// (MergeWait of a nanosecond) may miss a group only the slower node holds;
// that node's answer, arriving later, still fixes the cached route. (On
// loopback both answers often arrive together; TestAbsorbLate forces the
// late case.)
func TestLateAnswersReachTheCache(t *testing.T) {
	ca := newTestCA(t)
	tns := sortedNodes(t, ca, 2, nil)
	for _, tn := range tns {
		register(t, tn, "b1", "10.0.0.1:10911", 4, "t1")
	}
	register(t, tns[1], "b2", "10.0.0.2:10911", 4, "t1")
	c := newClient(t, ca, nodes.Static(addrsOf(tns)...), func(cfg *routeclient.Config) { cfg.MergeWait = time.Nanosecond })
	ctx := ctxT(t)
	route, _, err := c.Route(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first read: %d groups", len(route.Brokers))
	waitFor(t, "the cached route to name both groups", func() bool {
		route, _, err := c.Route(ctx, "t1") // from the cache: no query
		return err == nil && len(route.Brokers) == 2
	})
	// The slower node's ask may still be on its way (dialing) when the
	// first answer returns the read: it is counted once it is sent.
	waitFor(t, "the ask of the second node", func() bool { return c.Stats().Queries >= 2 })
	if st := c.Stats(); st.Queries != 2 {
		t.Errorf("stats %+v: want one read to each node and nothing more", st)
	}
}
