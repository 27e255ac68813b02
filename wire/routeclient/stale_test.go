package routeclient_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/routeclient"
)

// lookupResult is what a Route call in the background returned.
type lookupResult struct {
	version uint64
	err     error
}

// heldLookup starts Route(topic) in the background and holds its answer
// from the node before it is cached until release is called: the test
// changes the world meanwhile.
func heldLookup(t *testing.T, c *routeclient.Client, topic string) (release func(), done <-chan lookupResult) {
	t.Helper()
	answered, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	routeclient.SetLookupHook(c, func(string) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(answered)
			<-hold
		}
	})
	out := make(chan lookupResult, 1)
	go func() {
		_, v, err := c.Route(ctxT(t), topic)
		out <- lookupResult{v, err}
	}()
	<-answered
	var rel sync.Once
	release = func() { rel.Do(func() { close(hold) }) }
	t.Cleanup(release)
	return release, out
}

// TestReadInFlightDoesNotUndoANewerPush: a Route lookup has the node's
// answer (route A) when the route changes to B and a watch pushes B into
// the cache; only then is the lookup's answer recorded. Versions are hashes
// (PROTOCOL.md 9), so the client cannot tell A from B by their numbers:
// before, the lookup wrote A over B unconditionally, and since the watch
// had delivered B it pushed nothing more, so the client served A for a
// whole refresh interval (30 s by default) while its watcher had B.
func TestReadInFlightDoesNotUndoANewerPush(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	c := newClient(t, ca, nodes.Static(tn.Addr()), func(cfg *routeclient.Config) { cfg.Fanout = 1 })
	release, done := heldLookup(t, c, "orders") // holds route A, 4 write queues

	register(t, tn, "b1", "10.0.0.1:10911", 8, "orders") // route B
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch, err := c.Watch(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	b := until(t, ch, "8 write queues", func(u routeclient.Update) bool { return writeQueues(u) == 8 })
	waitFor(t, "the push in the cache", func() bool {
		v, _ := routeclient.CachedVersion(c, "orders")
		return v == b.Version
	})
	release()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.version != b.Version {
		t.Errorf("the lookup returned v%x after the watch delivered v%x: an older route", r.version, b.Version)
	}
	route, v, err := c.Route(ctxT(t), "orders")
	if err != nil || v != b.Version || len(route.Queues) != 1 || route.Queues[0].WriteQueues != 8 {
		t.Fatalf("Route after the push: v%x %+v, %v; want the pushed v%x (8 write queues)", v, route.Queues, err, b.Version)
	}
}

// TestReadInFlightDoesNotBringBackAGoneTopic: as above, but the push says
// the topic is gone (its last broker left). Before, the lookup's older
// answer put the route back in the cache, and Route served a topic no
// broker holds for two refresh intervals.
func TestReadInFlightDoesNotBringBackAGoneTopic(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	c := newClient(t, ca, nodes.Static(tn.Addr()), func(cfg *routeclient.Config) { cfg.Fanout = 1 })
	release, done := heldLookup(t, c, "orders") // holds the route

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch, err := c.Watch(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	until(t, ch, "the route", func(u routeclient.Update) bool { return !u.Gone })
	unregister(t, tn, "10.0.0.1:10911")
	until(t, ch, "gone", func(u routeclient.Update) bool { return u.Gone })
	waitFor(t, "the topic out of the cache", func() bool {
		_, ok := routeclient.CachedVersion(c, "orders")
		return !ok
	})
	release()
	if r := <-done; !errors.Is(r.err, wire.ErrNotFound) {
		t.Errorf("the lookup returned v%x, %v after the watch said gone; want not-found", r.version, r.err)
	}
	if _, v, err := c.Route(ctxT(t), "orders"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("Route after the gone push: v%x, %v; want not-found", v, err)
	}
}

// TestStaleRouteIsNotLookedUpOnEveryRead: no node answers and the cached
// route is stale. The first read looks it up, fails and serves the cached
// route; the next reads serve it at once until the next refresh, which
// looks again in the background. Before, every read looked it up again and
// waited for the nodes to fail (a request timeout per node for a node
// that drops packets), so a producer paid that on every send for as long
// as the outage lasted, and each read logged a warning.
func TestStaleRouteIsNotLookedUpOnEveryRead(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	c := newClient(t, ca, nodes.Static(tn.Addr()), func(cfg *routeclient.Config) {
		// Bounds the lookup once the node is down; the first read, with
		// the node up, dials it within this too: 300 ms, it timed out
		// under -race on a loaded machine.
		cfg.RequestTimeout = 5 * time.Second
	})
	ctx := ctxT(t)
	_, v, err := c.Route(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	var lookups atomic.Int32
	routeclient.SetLookupHook(c, func(string) { lookups.Add(1) })
	tn.Stop()
	routeclient.AgeCache(c, "orders", 3*time.Hour) // older than two refresh intervals
	for i := range 5 {
		if _, v2, err := c.Route(ctx, "orders"); err != nil || v2 != v {
			t.Fatalf("read %d: v%x, %v; want the stale v%x", i, v2, err, v)
		}
	}
	if n := lookups.Load(); n != 1 {
		t.Errorf("5 reads of a stale route while no node answers made %d lookups, want 1", n)
	}
	if s := c.Stats(); s.StaleServed != 5 {
		t.Errorf("StaleServed %d, want 5", s.StaleServed)
	}
}

// TestSlowReadDoesNotUndoANewerRefresh: a lookup of a stale route is sent
// and the node confirms route A; the route changes to B and a refresh,
// sent later, caches B; only then is the lookup's answer recorded. Before,
// the last answer recorded won whatever was sent first, so the cache went
// back from B to A, from the same node, and served A until the next
// refresh. The answer to the request sent last now wins.
func TestSlowReadDoesNotUndoANewerRefresh(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	c := newClient(t, ca, nodes.Static(tn.Addr()), func(cfg *routeclient.Config) { cfg.Fanout = 1 })
	ctx := ctxT(t)
	_, a, err := c.Route(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	routeclient.AgeCache(c, "orders", 3*time.Hour)
	release, done := heldLookup(t, c, "orders") // the node confirmed A

	register(t, tn, "b1", "10.0.0.1:10911", 8, "orders") // route B
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	b, _ := routeclient.CachedVersion(c, "orders")
	if b == a {
		t.Fatal("the refresh did not see route B")
	}
	release()
	if r := <-done; r.err != nil || r.version != b {
		t.Errorf("the slow lookup returned v%x, %v after the refresh cached v%x", r.version, r.err, b)
	}
	if v, _ := routeclient.CachedVersion(c, "orders"); v != b {
		t.Fatalf("the cache went back from v%x (refresh, sent last) to v%x (the slow lookup's, sent first)", b, v)
	}
}

// TestSlowReadDoesNotBringBackATopicANewerReadFoundGone: as above, but the
// refresh sent later finds the topic gone (its last broker left) and drops
// it. The entry, and its stamp, went with it, so the slow lookup's older
// answer put the route back and Route served a topic no broker holds.
func TestSlowReadDoesNotBringBackATopicANewerReadFoundGone(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	c := newClient(t, ca, nodes.Static(tn.Addr()), func(cfg *routeclient.Config) { cfg.Fanout = 1 })
	ctx := ctxT(t)
	if _, _, err := c.Route(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	routeclient.AgeCache(c, "orders", 3*time.Hour)
	release, done := heldLookup(t, c, "orders") // the node confirmed the route

	unregister(t, tn, "10.0.0.1:10911")
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := routeclient.CachedVersion(c, "orders"); ok {
		t.Fatal("the refresh did not drop the topic")
	}
	release()
	if r := <-done; !errors.Is(r.err, wire.ErrNotFound) {
		t.Errorf("the slow lookup returned v%x, %v after a later refresh found the topic gone; want not-found", r.version, r.err)
	}
	if v, ok := routeclient.CachedVersion(c, "orders"); ok {
		t.Fatalf("the slow lookup's older answer brought the topic back: v%x", v)
	}
	if reads, drops := routeclient.ReadsInFlight(c); reads != 0 || drops != 0 {
		t.Errorf("with every read done, %d reads counted in flight and %d drops kept", reads, drops)
	}
}

// TestCallersDeadlineDoesNotQuietTheLookups: a read whose own context has
// ended gets the stale cached route, but says nothing about the nodes: the
// next read still looks the route up.
func TestCallersDeadlineDoesNotQuietTheLookups(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	c := newClient(t, ca, nodes.Static(tn.Addr()), nil)
	if _, _, err := c.Route(ctxT(t), "orders"); err != nil {
		t.Fatal(err)
	}
	routeclient.AgeCache(c, "orders", 3*time.Hour)
	var lookups atomic.Int32
	routeclient.SetLookupHook(c, func(string) { lookups.Add(1) })
	ended, cancel := context.WithCancel(ctxT(t))
	cancel()
	if _, _, err := c.Route(ended, "orders"); err != nil {
		t.Fatalf("read with an ended context: %v, want the stale route", err)
	}
	if _, _, err := c.Route(ctxT(t), "orders"); err != nil {
		t.Fatal(err)
	}
	if n := lookups.Load(); n != 2 {
		t.Errorf("%d lookups, want 2: the second read must ask the nodes", n)
	}
}
