package broker_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/broker"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
)

const (
	cluster    = "c1"
	brokerName = "b1"
	brokerAddr = "10.0.0.1:10911"
)

func topics(names ...string) []wire.TopicConfig {
	out := make([]wire.TopicConfig, len(names))
	for i, n := range names {
		out[i] = wire.TopicConfig{Name: n, ReadQueues: 4, WriteQueues: 4, Perm: wire.PermRead | wire.PermWrite}
	}
	return out
}

func startNodes(t *testing.T, ca *testCA, n int) ([]*testNode, []string) {
	t.Helper()
	var tns []*testNode
	var addrs []string
	for range n {
		tn := startNode(t, ca, nil)
		tns = append(tns, tn)
		addrs = append(addrs, tn.Addr())
	}
	return tns, addrs
}

func testConfig(t *testing.T, ca *testCA, src nodes.Source) broker.Config {
	return broker.Config{
		Identity:            broker.Identity{Cluster: cluster, BrokerName: brokerName, Addr: brokerAddr},
		Topics:              topics("orders", "payments"),
		Nodes:               src,
		NodeRefreshInterval: 50 * time.Millisecond,
		TLS:                 ca.TLS(t, pki.RoleBroker, "broker-b1"),
		HeartbeatInterval:   50 * time.Millisecond,
		RequestTimeout:      2 * time.Second,
		Backoff:             nodes.Backoff{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:              testLogger(),
	}
}

// startRegistrar starts a registrar; it is closed when the test ends.
func startRegistrar(t *testing.T, cfg broker.Config) *broker.Registrar {
	t.Helper()
	r, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func lease(tn *testNode, addr string) (registry.LeaseInfo, bool) {
	n := tn.Node()
	if n == nil {
		return registry.LeaseInfo{}, false
	}
	return n.Registry().Lease(cluster, addr)
}

func hasRoute(tn *testNode, topic string) bool {
	_, _, err := tn.Node().Registry().RouteData(topic)
	return err == nil
}

func stateOf(r *broker.Registrar, addr string) (broker.NodeState, bool) {
	for _, st := range r.Nodes() {
		if st.Addr == addr {
			return st, true
		}
	}
	return broker.NodeState{}, false
}

func TestRegistersWithEveryNodeAndHeartbeats(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 3)
	r := startRegistrar(t, testConfig(t, ca, nodes.Static(addrs...)))
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for _, tn := range tns {
		l, ok := lease(tn, brokerAddr)
		if !ok || l.BrokerName != brokerName || l.DataVersion != r.DataVersion() {
			t.Fatalf("node %s: lease %+v, %v", tn.Addr(), l, ok)
		}
		for _, topic := range []string{"orders", "payments"} {
			if !hasRoute(tn, topic) {
				t.Fatalf("node %s has no route for %s", tn.Addr(), topic)
			}
		}
	}
	// Heartbeats renew every lease, and every renewal is acknowledged.
	waitFor(t, "three acknowledged heartbeats per node", func() bool {
		for _, st := range r.Nodes() {
			if st.Heartbeats < 3 {
				return false
			}
		}
		return true
	})
	states := r.Nodes()
	if len(states) != 3 {
		t.Fatalf("%d node states, want 3", len(states))
	}
	for i, st := range states {
		l, _ := lease(tns[slices.Index(addrs, st.Addr)], brokerAddr)
		switch {
		case st.Addr != slices.Sorted(slices.Values(addrs))[i]:
			t.Errorf("states not sorted by address: %v", st.Addr)
		case !st.Connected || !st.Registered || st.LastError != "":
			t.Errorf("state %+v", st)
		case st.Epoch != l.Epoch:
			t.Errorf("%s: epoch %d, node holds %d", st.Addr, st.Epoch, l.Epoch)
		case st.Registrations != 1 || st.Dials != 1:
			t.Errorf("%s: %d registrations over %d dials, want 1 and 1", st.Addr, st.Registrations, st.Dials)
		case st.LastAck.IsZero() || !st.LeaseDeadline.After(st.LastAck):
			t.Errorf("%s: last ack %v, lease deadline %v", st.Addr, st.LastAck, st.LeaseDeadline)
		case l.Heartbeats == 0:
			t.Errorf("%s: node counted no heartbeat", st.Addr)
		}
	}
}

func TestReRegistersAfterNodeRestart(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 2)
	r := startRegistrar(t, testConfig(t, ca, nodes.Static(addrs...)))
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	tns[0].Restart() // same address, same data directory, empty route tables
	waitFor(t, "registration with the restarted node", func() bool {
		_, ok := lease(tns[0], brokerAddr)
		return ok && hasRoute(tns[0], "orders")
	})
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	st, _ := stateOf(r, tns[0].Addr())
	if st.Registrations < 2 || st.Dials < 2 {
		t.Errorf("restarted node: %d registrations over %d dials, want at least 2 each", st.Registrations, st.Dials)
	}
	other, _ := stateOf(r, tns[1].Addr())
	if other.Registrations != 1 || other.Dials != 1 {
		t.Errorf("other node: %d registrations over %d dials, want 1 each", other.Registrations, other.Dials)
	}
}

func TestReRegistersWhenTheNodeLosesTheLease(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 1)
	tn := tns[0]
	r := startRegistrar(t, testConfig(t, ca, nodes.Static(addrs...)))
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// The node forgets the broker (as an expiry would): the next heartbeat
	// hears lease-not-found and registers in full.
	l, _ := lease(tn, brokerAddr)
	if err := tn.Node().Registry().Unregister(cluster, brokerAddr, l.Epoch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "re-registration after lease-not-found", func() bool {
		nl, ok := lease(tn, brokerAddr)
		return ok && nl.Epoch != l.Epoch && hasRoute(tn, "orders")
	})
	// Someone registers the same broker anew: the registrar's epoch is
	// stale and it registers again, taking the lease back.
	l, _ = lease(tn, brokerAddr)
	if _, err := tn.Node().Registry().Register(registry.Registration{
		Cluster: cluster, BrokerName: brokerName, Addr: brokerAddr, DataVersion: wire.DataVersion{Counter: 99},
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "re-registration after stale-epoch", func() bool {
		st, _ := stateOf(r, tn.Addr())
		nl, ok := lease(tn, brokerAddr)
		return ok && st.Registered && st.Epoch == nl.Epoch && nl.Epoch > l.Epoch+1 && nl.DataVersion == r.DataVersion()
	})
	if !hasRoute(tn, "payments") {
		t.Fatal("full registration did not restore the topics")
	}
}

func TestTopicChangesReachEveryNode(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 3)
	r := startRegistrar(t, testConfig(t, ca, nodes.Static(addrs...)))
	ctx := ctxT(t)
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	v0 := r.DataVersion()
	if err := r.UpsertTopics(topics("refunds")...); err != nil {
		t.Fatal(err)
	}
	if v := r.DataVersion(); v.Counter != v0.Counter+1 {
		t.Fatalf("data version %+v after one change from %+v", v, v0)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tn := range tns {
		if !hasRoute(tn, "refunds") {
			t.Fatalf("node %s has no route for the new topic", tn.Addr())
		}
	}
	if err := r.RemoveTopics("orders", "no-such-topic"); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tn := range tns {
		if hasRoute(tn, "orders") || !hasRoute(tn, "payments") {
			t.Fatalf("node %s: orders should be gone, payments kept", tn.Addr())
		}
	}
	// SetTopics sends the difference: payments changes, refunds goes,
	// audit comes.
	next := topics("payments", "audit")
	next[0].WriteQueues = 16
	if err := r.SetTopics(next); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tn := range tns {
		route, _, err := tn.Node().Registry().RouteData("payments")
		if err != nil || route.Queues[0].WriteQueues != 16 || hasRoute(tn, "refunds") || !hasRoute(tn, "audit") {
			t.Fatalf("node %s after SetTopics: %+v, %v", tn.Addr(), route, err)
		}
	}
	// An unchanged upsert is no change.
	v := r.DataVersion()
	if err := r.UpsertTopics(next[1]); err != nil || r.DataVersion() != v {
		t.Fatalf("no-op upsert: %v, version %+v -> %+v", err, v, r.DataVersion())
	}
	for _, st := range r.Nodes() {
		if st.Registrations != 1 || st.Updates != 3 {
			t.Errorf("%s: %d registrations and %d updates, want 1 full registration and 3 incremental updates", st.Addr, st.Registrations, st.Updates)
		}
	}
	if got := r.Topics(); len(got) != 2 || got[0].Name != "audit" || got[1].Name != "payments" {
		t.Errorf("Topics() = %+v", got)
	}
	if err := r.UpsertTopics(wire.TopicConfig{Name: "bad name"}); !errors.Is(err, broker.ErrInvalidConfig) {
		t.Errorf("invalid topic name: %v", err)
	}
}

// RefreshTopics sends a topic the registrar holds unchanged: a node where
// an operator deleted it routes it again, which UpsertTopics would not do.
func TestRefreshTopicsResendsUnchanged(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 2)
	r := startRegistrar(t, testConfig(t, ca, nodes.Static(addrs...)))
	ctx := ctxT(t)
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tn := range tns {
		if err := tn.Node().Registry().DeleteTopic("orders"); err != nil {
			t.Fatal(err)
		}
	}
	held := r.Topics()
	i := slices.IndexFunc(held, func(tc wire.TopicConfig) bool { return tc.Name == "orders" })
	if i < 0 {
		t.Fatalf("the registrar holds no orders: %+v", held)
	}
	v := r.DataVersion()
	if err := r.UpsertTopics(held[i]); err != nil || r.DataVersion() != v {
		t.Fatalf("unchanged upsert: %v, version %+v -> %+v", err, v, r.DataVersion())
	}
	if err := r.RefreshTopics(held[i]); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tn := range tns {
		if !hasRoute(tn, "orders") {
			t.Errorf("node %s does not route the refreshed topic", tn.Addr())
		}
	}
}

func TestStopUnregistersEverywhere(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 3)
	r := startRegistrar(t, testConfig(t, ca, nodes.Static(addrs...)))
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for _, tn := range tns {
		if _, ok := lease(tn, brokerAddr); ok || hasRoute(tn, "orders") {
			t.Errorf("node %s still holds the broker after Stop", tn.Addr())
		}
	}
	if err := r.Stop(ctxT(t)); !errors.Is(err, broker.ErrStopped) {
		t.Errorf("second Stop: %v", err)
	}
	if err := r.UpsertTopics(topics("x")...); !errors.Is(err, broker.ErrStopped) {
		t.Errorf("upsert after Stop: %v", err)
	}
	if err := r.WaitSynced(ctxT(t)); !errors.Is(err, broker.ErrStopped) {
		t.Errorf("WaitSynced after Stop: %v", err)
	}
}

func TestStopIsBoundedByItsContext(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 1)
	r := startRegistrar(t, testConfig(t, ca, nodes.Static(addrs...)))
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// The node goes away: Stop cannot unregister, says so, and returns
	// once its context ends instead of retrying.
	tns[0].Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := r.Stop(ctx); err == nil {
		t.Fatal("Stop reported success unregistering from a node that is down")
	}
}

func TestCloseKeepsLeases(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 2)
	r := startRegistrar(t, testConfig(t, ca, nodes.Static(addrs...)))
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tn := range tns {
		if _, ok := lease(tn, brokerAddr); !ok {
			t.Errorf("node %s lost the lease on Close", tn.Addr())
		}
	}
}

func TestRunUnregistersWhenTheContextEnds(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 2)
	r, err := broker.New(testConfig(t, ca, nodes.Static(addrs...)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, "registration", func() bool { _, ok := lease(tns[1], brokerAddr); return ok })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, tn := range tns {
		if _, ok := lease(tn, brokerAddr); ok {
			t.Errorf("node %s still holds the broker after Run returned", tn.Addr())
		}
	}
}

func TestNodeListChanges(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 3)
	list := nodes.NewList(addrs[0], addrs[1])
	cfg := testConfig(t, ca, list)
	cfg.NodeRefreshInterval = time.Hour // a List notifies: no polling needed
	r := startRegistrar(t, cfg)
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	list.Set(addrs[1], addrs[2])
	waitFor(t, "registration with the added node", func() bool {
		_, ok := lease(tns[2], brokerAddr)
		return ok
	})
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	got := r.Nodes()
	if len(got) != 2 || got[0].Addr != min(addrs[1], addrs[2]) || got[1].Addr != max(addrs[1], addrs[2]) {
		t.Fatalf("node states after the change: %+v", got)
	}
	// The dropped node is not unregistered (its lease runs out by itself)
	// and hears nothing more.
	l, ok := lease(tns[0], brokerAddr)
	if !ok {
		t.Fatal("the dropped node lost the lease: the registrar unregistered from it")
	}
	time.Sleep(5 * cfg.HeartbeatInterval)
	if l2, _ := lease(tns[0], brokerAddr); l2.Heartbeats != l.Heartbeats {
		t.Errorf("the dropped node still receives heartbeats: %d -> %d", l.Heartbeats, l2.Heartbeats)
	}
	// An empty list is ignored: the registrar keeps the nodes it has.
	list.Set()
	time.Sleep(5 * cfg.HeartbeatInterval)
	if n := len(r.Nodes()); n != 2 {
		t.Errorf("%d nodes after an empty list, want the last 2 kept", n)
	}
}

// fakeResolver answers LookupHost and LookupSRV from maps the test sets.
type fakeResolver struct {
	mu    sync.Mutex
	hosts map[string][]string
	srv   map[string][]*net.SRV
	err   error
	fails int // lookups answered with err
}

func (f *fakeResolver) failures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fails
}

func (f *fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return slices.Clone(f.hosts[host]), nil
}

func (f *fakeResolver) LookupSRV(_ context.Context, service, proto, name string) (string, []*net.SRV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		f.fails++
		return "", nil, f.err
	}
	return name, slices.Clone(f.srv[name]), nil
}

func (f *fakeResolver) setSRV(name string, addrs ...string) {
	var recs []*net.SRV
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		recs = append(recs, &net.SRV{Target: host + ".", Port: uint16(p)})
	}
	f.mu.Lock()
	f.srv = map[string][]*net.SRV{name: recs}
	f.mu.Unlock()
}

func TestDNSSources(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 3)

	t.Run("A", func(t *testing.T) {
		_, port, _ := net.SplitHostPort(addrs[0])
		p, _ := strconv.Atoi(port)
		res := &fakeResolver{hosts: map[string][]string{"edgereg.test": {"127.0.0.1"}}}
		r := startRegistrar(t, testConfig(t, ca, nodes.DNS("edgereg.test", p, res)))
		if err := r.WaitSynced(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if got := r.Nodes(); len(got) != 1 || got[0].Addr != addrs[0] {
			t.Fatalf("nodes %+v, want %s", got, addrs[0])
		}
		r.Close()
	})

	t.Run("SRV", func(t *testing.T) {
		res := &fakeResolver{}
		res.setSRV("edgereg.ns.svc", addrs[0], addrs[1])
		r := startRegistrar(t, testConfig(t, ca, nodes.DNSSRV("", "", "edgereg.ns.svc", res)))
		if err := r.WaitSynced(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		// A failing lookup keeps the list.
		res.mu.Lock()
		res.err = errors.New("SERVFAIL")
		res.mu.Unlock()
		waitFor(t, "three failed lookups", func() bool { return res.failures() >= 3 })
		if got := r.Nodes(); len(got) != 2 || !got[0].Registered || !got[1].Registered {
			t.Fatalf("nodes after failed lookups: %+v, want the 2 kept, registered", got)
		}
		res.mu.Lock()
		res.err = nil
		res.mu.Unlock()
		res.setSRV("edgereg.ns.svc", addrs[2], addrs[1])
		waitFor(t, "the node list to follow DNS", func() bool {
			got := r.Nodes()
			return len(got) == 2 && slices.ContainsFunc(got, func(s broker.NodeState) bool { return s.Addr == addrs[2] && s.Registered })
		})
		if _, ok := lease(tns[2], brokerAddr); !ok {
			t.Fatal("no lease on the node DNS added")
		}
		r.Close()
	})
}

func TestHTTPSource(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 2)
	var mu sync.Mutex
	body := addrs[0] + ";" + addrs[1]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	r := startRegistrar(t, testConfig(t, ca, nodes.HTTP(srv.URL, srv.Client())))
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for _, tn := range tns {
		if _, ok := lease(tn, brokerAddr); !ok {
			t.Fatalf("no lease on %s", tn.Addr())
		}
	}
	mu.Lock()
	body = addrs[1] + "\n"
	mu.Unlock()
	waitFor(t, "the node list to follow the address service", func() bool { return len(r.Nodes()) == 1 })
	if got := r.Nodes()[0].Addr; got != addrs[1] {
		t.Fatalf("kept %s, want %s", got, addrs[1])
	}
	r.Close()
	srv.Client().CloseIdleConnections()
}

func TestSlaveLearnsItsMaster(t *testing.T) {
	ca := newTestCA(t)
	_, addrs := startNodes(t, ca, 1)
	// The slave registers before its master: it learns the master's
	// address when the master is there, by registering again.
	slave := testConfig(t, ca, nodes.Static(addrs...))
	slave.Identity.BrokerID, slave.Identity.Addr = 1, "10.0.0.2:10911"
	rs := startRegistrar(t, slave)
	if err := rs.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	master := testConfig(t, ca, nodes.Static(addrs...))
	master.Identity.HAAddr = "10.0.0.1:10912"
	startRegistrar(t, master)
	waitFor(t, "the slave to learn its master", func() bool {
		st := rs.Nodes()
		return len(st) == 1 && st[0].MasterAddr == brokerAddr && st[0].MasterHAAddr == "10.0.0.1:10912"
	})
	// A slave's topic change is sent in full (the node takes topic config
	// only from masters, and refuses a slave's update) and still
	// acknowledged; the node ignores the slave's topics.
	regs := rs.Nodes()[0].Registrations
	if err := rs.UpsertTopics(topics("slave-topic")...); err != nil {
		t.Fatal(err)
	}
	if err := rs.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if st := rs.Nodes()[0]; st.Registrations <= regs || st.Updates != 0 || st.Refused != nil {
		t.Errorf("slave after a topic change: %d registrations (was %d), %d updates, refused %v; want a full registration", st.Registrations, regs, st.Updates, st.Refused)
	}
}

func TestConfigValidation(t *testing.T) {
	ca := newTestCA(t)
	good := testConfig(t, ca, nodes.Static("127.0.0.1:9876"))
	tests := []struct {
		name string
		edit func(*broker.Config)
	}{
		{"no cluster", func(c *broker.Config) { c.Identity.Cluster = "" }},
		{"no broker name", func(c *broker.Config) { c.Identity.BrokerName = "" }},
		{"negative id", func(c *broker.Config) { c.Identity.BrokerID = -1 }},
		{"no addr", func(c *broker.Config) { c.Identity.Addr = "" }},
		{"bad addr", func(c *broker.Config) { c.Identity.Addr = "nohostport" }},
		{"bad HA addr", func(c *broker.Config) { c.Identity.HAAddr = "x" }},
		{"no nodes", func(c *broker.Config) { c.Nodes = nil }},
		{"no TLS", func(c *broker.Config) { c.TLS = nil }},
		{"timeout below interval", func(c *broker.Config) { c.HeartbeatTimeout = c.HeartbeatInterval }},
		{"bad topic", func(c *broker.Config) { c.Topics = topics("a/b") }},
		{"long topic", func(c *broker.Config) { c.Topics = topics(strings.Repeat("x", 128)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.edit(&cfg)
			if _, err := broker.New(cfg); !errors.Is(err, broker.ErrInvalidConfig) {
				t.Fatalf("New: %v, want ErrInvalidConfig", err)
			}
		})
	}
	r, err := broker.New(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(ctxT(t)); err != nil {
		t.Errorf("Stop before Start: %v", err)
	}
	if err := r.Start(); !errors.Is(err, broker.ErrStopped) {
		t.Errorf("Start after Stop: %v", err)
	}
}

// TestWaitSyncedBeforeRun is the README's pattern: go r.Run(ctx), then
// WaitSynced, which may well run before Run has started the registrar. It
// waits for the start instead of failing.
func TestWaitSyncedBeforeRun(t *testing.T) {
	ca := newTestCA(t)
	_, addrs := startNodes(t, ca, 1)
	r, err := broker.New(testConfig(t, ca, nodes.Static(addrs...)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() {
		time.Sleep(20 * time.Millisecond) // let WaitSynced come first
		ran <- r.Run(ctx)
	}()
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Errorf("WaitSynced called before Run started: %v", err)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}

	// A registrar closed before it ever started ends the wait too.
	r2, err := broker.New(testConfig(t, ca, nodes.Static(addrs...)))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		r2.Close()
	}()
	if err := r2.WaitSynced(ctxT(t)); !errors.Is(err, broker.ErrStopped) {
		t.Errorf("WaitSynced on a registrar closed before it started: %v, want ErrStopped", err)
	}
}

// TestStopWithOneNodeBlackHoled cuts the link to one of two nodes, so that
// its packets vanish without an error (no ICMP, no reset): Stop still
// unregisters from the other node, returns by its context, and reports the
// black-holed node as failed.
func TestStopWithOneNodeBlackHoled(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 2)
	p := newProxy(t, addrs[1])
	cfg := testConfig(t, ca, nodes.Static(addrs[0], p.Addr()))
	cfg.ProbeInterval = -1 // nothing notices the cut before Stop
	var logs nodetest.LogBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	r := startRegistrar(t, cfg)
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	p.SetDrop(100)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop(ctx) }()
	var err error
	select {
	case err = <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("Stop did not return after its context ended")
	}
	if err == nil || !strings.Contains(err.Error(), p.Addr()) {
		t.Errorf("Stop returned %v, want the black-holed node's failure", err)
	}
	if strings.Contains(err.Error(), addrs[0]) {
		t.Errorf("Stop reported the reachable node as failed: %v", err)
	}
	if _, ok := lease(tns[0], brokerAddr); ok {
		t.Error("the reachable node still holds the lease after Stop")
	}
	if _, ok := lease(tns[1], brokerAddr); !ok {
		t.Error("the black-holed node lost the lease: the cut did not hold")
	}
	// The log said "broker unregistered", at info level, with failed=1
	// for the node that still holds the broker.
	if out := logs.String(); strings.Contains(out, `msg="broker unregistered"`) ||
		!strings.Contains(out, `level=WARN msg="broker not unregistered from every node"`) {
		t.Errorf("a Stop that missed a node logged:\n%s", out)
	}
}

// TestDroppedSessionReportsNothingAfterReAdd: a session calls
// OnStateChange after releasing the Registrar's lock. Held there, as a
// preempted goroutine on a loaded machine is, the report of a session
// since dropped from the node list reached the application after the
// report of the session that replaced it when the node was listed again:
// the application was told the node was connected but not registered
// while the broker was registered there. A dropped session reports nothing
// once it is no longer listed.
func TestDroppedSessionReportsNothingAfterReAdd(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 2)
	list := nodes.NewList(addrs[0], addrs[1])
	cfg := testConfig(t, ca, list)
	cfg.NodeRefreshInterval = time.Hour // a List notifies
	var (
		log          stateLog
		holding      atomic.Bool
		held         atomic.Bool
		readded      atomic.Bool
		reRegistered = make(chan struct{})
		released     = make(chan struct{})
		once         sync.Once
	)
	cfg.OnStateChange = func(st broker.NodeState) {
		log.add(st)
		if st.Addr == addrs[0] && st.Registered && readded.Load() {
			once.Do(func() { close(reRegistered) })
		}
	}
	// The first session's report that its connection broke (the node
	// restarted) waits until the node was dropped, listed again, and its
	// new session reported the registration.
	defer broker.SetTestHookStateChange(func(st broker.NodeState) {
		if !holding.Load() || st.Addr != addrs[0] || st.Connected || held.Swap(true) {
			return
		}
		select {
		case <-reRegistered:
		case <-time.After(30 * time.Second):
		}
		close(released)
	})()
	r := startRegistrar(t, cfg)
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// The old session's reports carry the epoch of the node before its
	// restart; the new session's, the epoch it registered with after it.
	old, _ := stateOf(r, addrs[0])
	holding.Store(true)
	tns[0].Restart()
	waitFor(t, "the session to report the broken connection", held.Load)
	list.Set(addrs[1])
	waitFor(t, "the node to be dropped", func() bool { return len(r.Nodes()) == 1 })
	readded.Store(true)
	list.Set(addrs[0], addrs[1])
	select {
	case <-released:
	case <-time.After(60 * time.Second):
		t.Fatal("the held report was never released")
	}
	// Close waits for every session, the dropped one too: whatever the
	// held report was going to deliver has been delivered.
	r.Close()
	var renewed bool
	for _, st := range log.all() {
		switch {
		case st.Addr != addrs[0]:
		case st.Registered && st.Epoch != old.Epoch:
			renewed = true
		case renewed && st.Epoch == old.Epoch:
			t.Fatalf("after the node was listed again and registered, OnStateChange said %+v: the dropped session's report came after the new one's", st)
		}
	}
	if !renewed {
		t.Fatalf("no report of a registration under a new epoch (the old was %d): %+v", old.Epoch, log.all())
	}
}
