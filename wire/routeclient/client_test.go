package routeclient_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/routeclient"
)

const cluster = "c1"

var versionCounter atomic.Uint64

// register registers a broker group's master directly in a node's tables,
// with writeQueues on every topic.
func register(t testing.TB, tn *testNode, group, addr string, writeQueues uint32, topics ...string) {
	t.Helper()
	reg := registry.Registration{Cluster: cluster, BrokerName: group, Addr: addr,
		DataVersion: wire.DataVersion{Counter: versionCounter.Add(1)}}
	for _, name := range topics {
		reg.Topics = append(reg.Topics, wire.TopicConfig{Name: name, ReadQueues: 4, WriteQueues: writeQueues, Perm: wire.PermRead | wire.PermWrite})
	}
	if _, err := tn.Node().Registry().Register(reg); err != nil {
		t.Fatal(err)
	}
}

func unregister(t testing.TB, tn *testNode, addr string) {
	t.Helper()
	l, ok := tn.Node().Registry().Lease(cluster, addr)
	if !ok {
		t.Fatalf("no lease for %s", addr)
	}
	if err := tn.Node().Registry().Unregister(cluster, addr, l.Epoch); err != nil {
		t.Fatal(err)
	}
}

// getRoutes is the metric counting get-routes requests a node handled.
const getRoutes = `edgereg_request_duration_seconds_count{kind="get-routes"}`

func withAdmin(c *node.Config) { c.AdminAddr = "127.0.0.1:0" }

func newClient(t testing.TB, ca *testCA, src nodes.Source, edit func(*routeclient.Config)) *routeclient.Client {
	t.Helper()
	cfg := routeclient.Config{
		Nodes:               src,
		TLS:                 ca.TLS(t, pki.RoleClient, "test-client"),
		RefreshInterval:     time.Hour, // tests refresh by hand unless they say otherwise
		RequestTimeout:      2 * time.Second,
		NodeRefreshInterval: 50 * time.Millisecond,
		Backoff:             nodes.Backoff{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:              testLogger(),
	}
	if edit != nil {
		edit(&cfg)
	}
	c, err := routeclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sortedNodes starts n nodes and returns them in address order, which is
// the order a fresh client tries them in.
func sortedNodes(t *testing.T, ca *testCA, n int, edit func(*node.Config)) []*testNode {
	var tns []*testNode
	for range n {
		tns = append(tns, startNode(t, ca, edit))
	}
	slices.SortFunc(tns, func(a, b *testNode) int {
		switch {
		case a.Addr() < b.Addr():
			return -1
		case a.Addr() > b.Addr():
			return 1
		}
		return 0
	})
	return tns
}

func addrsOf(tns []*testNode) []string {
	out := make([]string, len(tns))
	for i, tn := range tns {
		out[i] = tn.Addr()
	}
	return out
}

func TestRouteCachesAndRefreshesInOneRequest(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, withAdmin)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "t1", "t2", "t3")
	c := newClient(t, ca, nodes.Static(tn.Addr()), nil)
	ctx := ctxT(t)

	versions := map[string]uint64{}
	for _, topic := range []string{"t1", "t2", "t3"} {
		route, v, err := c.Route(ctx, topic)
		if err != nil || v == 0 || len(route.Brokers) != 1 || route.Brokers[0].Addrs[wire.MasterID] != "10.0.0.1:10911" {
			t.Fatalf("route %s: %+v v%d, %v", topic, route, v, err)
		}
		versions[topic] = v
	}
	if _, v, err := c.Route(ctx, "t1"); err != nil || v != versions["t1"] {
		t.Fatalf("cached route: v%d, %v", v, err)
	}
	if s := c.Stats(); s.Queries != 3 || s.CacheHits != 1 {
		t.Fatalf("stats %+v: want 3 queries and 1 cache hit", s)
	}

	// A refresh of three unchanged topics is one request, answered "not
	// modified" for each.
	reqs := metric(t, tn, getRoutes)
	notModified := metric(t, tn, `edgereg_route_reads_total{result="not_modified"}`)
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if d := metric(t, tn, getRoutes) - reqs; d != 1 {
		t.Errorf("refresh sent %d requests, want 1", d)
	}
	if d := metric(t, tn, `edgereg_route_reads_total{result="not_modified"}`) - notModified; d != 3 {
		t.Errorf("refresh got %d not-modified answers, want 3", d)
	}
	if s := c.Stats(); s.Refreshes != 1 || s.NotModified != 3 || s.Updated != 0 {
		t.Errorf("stats %+v: want 1 refresh, 3 not modified", s)
	}

	// A changed route comes back whole; a deleted topic leaves the cache.
	register(t, tn, "b2", "10.0.0.2:10911", 4, "t2")
	unregister(t, tn, "10.0.0.1:10911")
	register(t, tn, "b3", "10.0.0.3:10911", 4, "t2", "t3")
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Refreshes != 2 || s.Updated != 2 {
		t.Errorf("stats %+v: want 2 refreshes and 2 updated routes", s)
	}
	route, v, err := c.Route(ctx, "t2")
	if err != nil || v == versions["t2"] || len(route.Brokers) != 2 {
		t.Errorf("t2 after refresh: %+v v%d, %v", route, v, err)
	}
	queries := c.Stats().Queries
	if _, _, err := c.Route(ctx, "t1"); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("t1 after its broker left: %v, want not found", err)
	}
	if c.Stats().Queries != queries+1 {
		t.Error("a topic a refresh found gone was served from the cache")
	}
}

func TestRouteFailsOver(t *testing.T) {
	ca := newTestCA(t)
	tns := sortedNodes(t, ca, 3, nil)
	for _, tn := range tns {
		register(t, tn, "b1", "10.0.0.1:10911", 4, "t1", "t2", "t3")
	}
	// A black hole: a UDP port that never answers, so asking it times out.
	hole, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hole.Close() })
	list := nodes.NewList(append([]string{hole.LocalAddr().String()}, addrsOf(tns)...)...)
	// One node at a time, so every failover shows (with a fan-out of 2 a
	// read is answered by whichever asked node answers).
	c := newClient(t, ca, list, func(cfg *routeclient.Config) { cfg.RequestTimeout, cfg.Fanout = 300*time.Millisecond, 1 })
	ctx := ctxT(t)

	tns[0].Stop() // down before the first query
	if _, _, err := c.Route(ctx, "t1"); err != nil {
		t.Fatalf("route with a node down and a silent one listed: %v", err)
	}
	if s := c.Stats(); s.Failovers == 0 {
		t.Errorf("stats %+v: want a failover", s)
	}
	// The node that answered shuts down: the next query goes elsewhere.
	failovers := c.Stats().Failovers
	tns[1].Stop()
	tns[2].Stop()
	tns[2].Start()                                       // restarted on the same address: its tables are empty...
	register(t, tns[2], "b1", "10.0.0.1:10911", 4, "t2") // ...until the broker is back
	if _, _, err := c.Route(ctx, "t2"); err != nil {
		t.Fatalf("route after the answering node shut down: %v", err)
	}
	if c.Stats().Failovers == failovers {
		t.Error("no failover after the answering node shut down")
	}
	// Every node down: an error, not a hang.
	tns[2].Stop()
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, _, err := c.Route(qctx, "t3"); err == nil {
		t.Fatal("route with every node down succeeded")
	}
}

func TestWarmingUpAnswersFailOver(t *testing.T) {
	ca := newTestCA(t)
	tns := sortedNodes(t, ca, 2, func(cfg *node.Config) { cfg.WarmUp = time.Hour })
	register(t, tns[1], "b1", "10.0.0.1:10911", 4, "orders") // the first node does not know it yet
	c := newClient(t, ca, nodes.Static(addrsOf(tns)...), func(cfg *routeclient.Config) { cfg.Fanout = 1 })
	ctx := ctxT(t)
	route, _, err := c.Route(ctx, "orders")
	if err != nil || len(route.Brokers) != 1 {
		t.Fatalf("route: %+v, %v", route, err)
	}
	if s := c.Stats(); s.Failovers != 1 || s.Queries != 2 {
		t.Errorf("stats %+v: want the warming-up node asked, then one failover", s)
	}
	if _, _, err := c.Route(ctx, "nowhere"); !errors.Is(err, wire.ErrWarmingUp) {
		t.Errorf("a topic no node knows while all warm up: %v, want warming up", err)
	}
}

// rocketmq#2042: a client kept asking a name server removed from its list.
func TestNodeThatLeftTheListIsNeverAskedAgain(t *testing.T) {
	ca := newTestCA(t)
	tns := sortedNodes(t, ca, 2, withAdmin)
	for _, tn := range tns {
		register(t, tn, "b1", "10.0.0.1:10911", 4, "t1", "t2", "t3", "t4")
	}
	list := nodes.NewList(addrsOf(tns)...)
	c := newClient(t, ca, list, nil)
	ctx := ctxT(t)
	if _, _, err := c.Route(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	// The read asks both nodes (Fanout 2) and may return with the second's
	// answer while the first's connection is still being set up.
	waitFor(t, "the first node's connection", func() bool { return metric(t, tns[0], "edgereg_connections") == 1 })
	list.Set(tns[1].Addr())
	waitFor(t, "the node list change", func() bool { return slices.Equal(c.Nodes(), []string{tns[1].Addr()}) })
	waitFor(t, "the removed node's connection to close", func() bool { return metric(t, tns[0], "edgereg_connections") == 0 })
	before := metric(t, tns[0], getRoutes)
	for _, topic := range []string{"t2", "t3", "t4"} {
		if _, _, err := c.Route(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if after := metric(t, tns[0], getRoutes); after != before {
		t.Errorf("the removed node got %d more requests", after-before)
	}
	if metric(t, tns[1], getRoutes) == 0 {
		t.Error("the remaining node got no request")
	}
}

func TestStaleRouteServedWhenNoNodeAnswers(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	c := newClient(t, ca, nodes.Static(tn.Addr()), func(cfg *routeclient.Config) {
		cfg.RefreshInterval = 50 * time.Millisecond
		// Bounds the lookups once the node is down (no node answers: each
		// times out); the first, with the node up, dials it within this
		// too: 300 ms, it timed out under -race on a loaded machine.
		cfg.RequestTimeout = 5 * time.Second
	})
	ctx := ctxT(t)
	_, v, err := c.Route(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	tn.Stop()
	time.Sleep(200 * time.Millisecond) // two refresh intervals: the entry is stale
	_, v2, err := c.Route(ctx, "orders")
	if err != nil || v2 != v {
		t.Fatalf("stale route: v%d (want v%d), %v", v2, v, err)
	}
	if c.Stats().StaleServed == 0 {
		t.Error("no stale route counted")
	}
}

func TestRouteErrors(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	c := newClient(t, ca, nodes.Static(tn.Addr()), nil)
	ctx := ctxT(t)
	if _, _, err := c.Route(ctx, "no such"); !errors.Is(err, routeclient.ErrInvalidTopic) {
		t.Errorf("invalid topic: %v", err)
	}
	if _, _, err := c.Route(ctx, "missing"); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("missing topic: %v", err)
	}
	if _, err := c.Watch(ctx); !errors.Is(err, routeclient.ErrInvalidTopic) {
		t.Errorf("watch of nothing: %v", err)
	}
	if _, err := routeclient.New(routeclient.Config{TLS: ca.TLS(t, pki.RoleClient, "x")}); !errors.Is(err, routeclient.ErrInvalidConfig) {
		t.Errorf("no node source: %v", err)
	}
	if _, err := routeclient.New(routeclient.Config{Nodes: nodes.Static(tn.Addr())}); !errors.Is(err, routeclient.ErrInvalidConfig) {
		t.Errorf("no TLS: %v", err)
	}
	c.Close()
	if _, _, err := c.Route(ctx, "missing"); !errors.Is(err, routeclient.ErrClosed) {
		t.Errorf("route after Close: %v", err)
	}
	if _, err := c.Watch(ctx, "missing"); !errors.Is(err, routeclient.ErrClosed) {
		t.Errorf("watch after Close: %v", err)
	}
}

func TestConcurrentRoutesShareOneLookup(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	c := newClient(t, ca, nodes.Static(tn.Addr()), nil)
	ctx := ctxT(t)
	errs := make(chan error, 20)
	for range 20 {
		go func() {
			_, _, err := c.Route(ctx, "orders")
			errs <- err
		}()
	}
	for range 20 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if q := c.Stats().Queries; q > 2 {
		t.Errorf("20 concurrent lookups of one topic sent %d queries", q)
	}
}
