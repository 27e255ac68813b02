package gateway_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/lossyudp"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/remoting"
)

// startProxiedSite is a site of n nodes, each behind a lossy UDP proxy
// (the WAN), with edit changing the gateway's config.
func startProxiedSite(t *testing.T, n int, edit func(*gateway.Config)) (*site, []*lossyudp.Proxy) {
	t.Helper()
	s := &site{t: t, ca: nodetest.NewCA(t), ops: make(map[*nodetest.Node]*client.Conn)}
	var addrs []string
	var proxies []*lossyudp.Proxy
	for range n {
		tn := nodetest.Start(t, s.ca, func(c *node.Config) { c.ScanInterval = 20 * time.Millisecond })
		p, err := lossyudp.New(tn.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		s.nodes = append(s.nodes, tn)
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr())
	}
	s.startGateway(addrs, edit)
	return s, proxies
}

// fixtureTopics names the topics of the fixture's registration.
func (b *brokerRegs) fixtureTopics(more ...string) []string {
	var names []string
	for n := range b.body.TopicConfigTable {
		names = append(names, n)
	}
	slices.Sort(names)
	return append(names, more...)
}

// TestCreatedTopicIsRoutedOnceTheRegistrationIsAnswered: a broker creates
// a topic (a registration at a new data version listing it) and a client
// reads its route at once, as `mqadmin updateTopic` followed by a producer
// does. A NameServer answers the registration once it applied it; the
// gateway answered before any node had, so the read that follows got
// TOPIC_NOT_EXIST for a WAN round trip (here, while the WAN toward the
// node is cut for a moment).
func TestCreatedTopicIsRoutedOnceTheRegistrationIsAnswered(t *testing.T) {
	s, proxies := startProxiedSite(t, 2, func(c *gateway.Config) { c.RegisterWait = 20 * time.Second })
	c := s.dial()
	b := newBrokerRegs(t, c)
	b.send(1, b.fixtureTopics()...)
	s.onEveryNode("the broker's topics", func(tn *nodetest.Node) bool { _, ok := s.routeTopics(tn, "TopicTest"); return ok })

	for _, p := range proxies {
		p.SetDropEach(100, 0) // the update waits in QUIC's retransmissions
	}
	heal := time.AfterFunc(300*time.Millisecond, func() {
		for _, p := range proxies {
			p.SetDropEach(0, 0)
		}
	})
	t.Cleanup(func() { heal.Stop() })
	b.send(2, b.fixtureTopics("created_now")...)
	for i, tn := range s.nodes {
		if _, ok := s.routeTopics(tn, "created_now"); !ok {
			t.Errorf("the registration creating a topic was answered before node %d applied it", i)
		}
	}
	if resp := c.call(goRouteRequest("created_now")); resp.Code != remoting.Success {
		t.Errorf("route of a topic created by the answered registration: code %d %q", resp.Code, resp.Remark)
	}
}

// TestSingleTopicRegisterIsRoutedOnceAnswered: REGISTER_TOPIC_IN_NAMESRV
// (a 5.x broker with enableSingleTopicRegister creating a topic) is
// answered once the nodes applied it, as REGISTER_BROKER is.
func TestSingleTopicRegisterIsRoutedOnceAnswered(t *testing.T) {
	s, proxies := startProxiedSite(t, 2, func(c *gateway.Config) { c.RegisterWait = 20 * time.Second })
	c := s.dial()
	if resp := c.call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	s.onEveryNode("the broker's topics", func(tn *nodetest.Node) bool { _, ok := s.routeTopics(tn, "TopicTest"); return ok })
	for _, p := range proxies {
		p.SetDropEach(100, 0)
	}
	heal := time.AfterFunc(300*time.Millisecond, func() {
		for _, p := range proxies {
			p.SetDropEach(0, 0)
		}
	})
	t.Cleanup(func() { heal.Stop() })
	rt := &remoting.TopicRouteData{QueueDatas: []remoting.QueueData{
		{BrokerName: "broker-a", ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6},
	}}
	if resp := c.call(request(remoting.RegisterTopicInNameSrv, map[string]string{"topic": "single"}, rt.Encode(remoting.Standard))); resp.Code != remoting.Success {
		t.Fatalf("REGISTER_TOPIC_IN_NAMESRV: %d %q", resp.Code, resp.Remark)
	}
	for i, tn := range s.nodes {
		if _, ok := s.routeTopics(tn, "single"); !ok {
			t.Errorf("REGISTER_TOPIC_IN_NAMESRV was answered before node %d applied it", i)
		}
	}
}

// TestPolledReadsMergeNodes: nodes share nothing, so a node cut off from
// some brokers (or that one never reached) answers without them. Routes
// are merged from two nodes; cluster info and topic lists were read from
// one, so `mqadmin clusterList` or `topicList` through the gateway missed
// every group that node lacked.
func TestPolledReadsMergeNodes(t *testing.T) {
	s := startSite(t, 2, nil)
	a := &wire.Register{Cluster: "DefaultCluster", BrokerName: "broker-a", Addr: "127.0.0.1:10911",
		DataVersion: wire.DataVersion{Counter: 1}, Topics: topicConfigs(4, "only_a", "TBW102")}
	b := &wire.Register{Cluster: "DefaultCluster", BrokerName: "broker-b", Addr: "127.0.0.1:10921",
		DataVersion: wire.DataVersion{Counter: 1}, Topics: topicConfigs(4, "only_b", "TBW102")}
	for i, reg := range []*wire.Register{a, b} {
		if _, err := s.operator(s.nodes[i]).Register(nodetest.Context(t), reg); err != nil {
			t.Fatal(err)
		}
	}
	c := s.dial()
	resp := c.call(request(remoting.GetBrokerClusterInfo, nil, nil))
	ci, err := remoting.DecodeClusterInfo(resp.Body)
	if resp.Code != remoting.Success || err != nil {
		t.Fatalf("cluster info: %d %q %v", resp.Code, resp.Remark, err)
	}
	if got := ci.ClusterAddrTable["DefaultCluster"]; !slices.Equal(got, []string{"broker-a", "broker-b"}) {
		t.Errorf("cluster info through the gateway lists groups %v, want both nodes' broker-a and broker-b", got)
	}
	for _, name := range []string{"broker-a", "broker-b"} {
		if len(ci.BrokerAddrTable[name].BrokerAddrs) != 1 {
			t.Errorf("cluster info has no broker data for %s: %+v", name, ci.BrokerAddrTable)
		}
	}
	all := c.call(request(remoting.GetAllTopicListFromNameSrv, nil, nil))
	if got := topicList(t, all); !slices.Equal(got, []string{"TBW102", "only_a", "only_b"}) {
		t.Errorf("topic list through the gateway %v, want both nodes' topics", got)
	}
}

// registeredEverywhere reports whether the gateway's registrar of addr is
// registered with every node.
func registeredEverywhere(t *testing.T, gw *gateway.Gateway, addr string) bool {
	for _, b := range gw.Brokers() {
		if b.Addr != addr {
			continue
		}
		for _, n := range b.Nodes {
			if !n.Registered {
				return false
			}
		}
		return len(b.Nodes) > 0
	}
	return false
}

// TestRestartedNodeNeverSaysAnUncachedTopicIsGone: a node restarts (its
// warm-up over, or none) before the gateway's registrar has registered
// the site's broker with it again, so for a while it knows no broker
// holding the broker's topics. A cached route was kept (brokerTable
// vouches); a first read of a topic the broker holds was answered
// TOPIC_NOT_EXIST, which sends a Go producer to TBW102 and makes a Java
// consumer drop the topic. It must be withheld until the nodes know.
func TestRestartedNodeNeverSaysAnUncachedTopicIsGone(t *testing.T) {
	s := startSite(t, 1, func(c *gateway.Config) {
		c.Backoff = nodes.Backoff{Min: 3 * time.Second, Max: 3 * time.Second} // the registrar comes back late
		c.UpstreamTimeout, c.RequestTimeout = 500*time.Millisecond, 500*time.Millisecond
	})
	c := s.dial()
	if resp := c.call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	nodetest.WaitFor(t, "the registration", func() bool { return registeredEverywhere(t, s.gw, masterAddr) })
	s.nodes[0].Restart()
	nodetest.WaitFor(t, "the registrar to see the restart", func() bool { return !registeredEverywhere(t, s.gw, masterAddr) })
	for i := 0; i < 500 && !registeredEverywhere(t, s.gw, masterAddr); i++ {
		rc := s.dial()
		rc.send(goRouteRequest("TopicTest"))
		rc.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := remoting.ReadCommand(rc.br, 0)
		if err == nil && resp.Code == remoting.TopicNotExist {
			t.Fatalf("read %d: TOPIC_NOT_EXIST for a topic the site's broker holds, while its registrar registers it again", i)
		}
		rc.nc.Close()
	}
	nodetest.WaitFor(t, "the registration again", func() bool { return registeredEverywhere(t, s.gw, masterAddr) })
	nodetest.WaitFor(t, "the route once the node knows", func() bool {
		return c.call(goRouteRequest("TopicTest")).Code == remoting.Success
	})
}

// TestRouteClientCacheFollowsTheGatewayCache: the gateway caches at most
// MaxTopics routes and forgets idle ones, but the route client under it
// kept every route ever read, and refreshed all of them every interval
// for the gateway's life: reads of many topics (past the cap, or over
// time) grew its memory and its WAN refreshes without bound.
func TestRouteClientCacheFollowsTheGatewayCache(t *testing.T) {
	s := startSite(t, 1, func(c *gateway.Config) { c.MaxTopics = 2 })
	var names []string
	for i := range 12 {
		names = append(names, "t"+strconv.Itoa(i))
	}
	s.registerQUIC(&wire.Register{Cluster: "DefaultCluster", BrokerName: "broker-a", Addr: masterAddr,
		DataVersion: wire.DataVersion{Counter: 1}, Topics: topicConfigs(2, names...)})
	c := s.dial()
	for _, n := range names {
		if resp := c.call(goRouteRequest(n)); resp.Code != remoting.Success {
			t.Fatalf("route of %s: %d %q", n, resp.Code, resp.Remark)
		}
	}
	if n := gateway.RoutesCached(s.gw); n > 2 {
		t.Errorf("the route client caches %d routes past the gateway's MaxTopics of 2", n)
	}
	gateway.ForgetIdle(s.gw, 0)
	nodetest.WaitFor(t, "the route client to forget the idle topics", func() bool { return gateway.RoutesCached(s.gw) == 0 })
}

// countingSource is a node source that counts its reads, as an address
// service or a DNS server would see them.
type countingSource struct {
	nodes.Source
	reads atomic.Int64
}

func (c *countingSource) Nodes(ctx context.Context) ([]string, error) {
	c.reads.Add(1)
	return c.Source.Nodes(ctx)
}

// TestNodeSourceReadOncePerRefresh: every broker's registrar followed the
// node source on its own, so a gateway of 1000 brokers behind --nodes-url
// sent the address service 1000 requests per refresh interval (and as
// many DNS lookups behind --nodes-dns), and its brokers' node lists could
// differ for an interval. The gateway reads the source; its registrars and
// route client follow what it read.
func TestNodeSourceReadOncePerRefresh(t *testing.T) {
	s := &site{t: t, ca: nodetest.NewCA(t), ops: make(map[*nodetest.Node]*client.Conn)}
	tn := nodetest.Start(t, s.ca, nil)
	s.nodes = []*nodetest.Node{tn}
	src := &countingSource{Source: nodes.Static(tn.Addr())}
	s.startGateway([]string{tn.Addr()}, func(c *gateway.Config) {
		c.Nodes, c.NodeRefreshInterval = src, time.Hour // one read per follower, then none
	})
	c := s.dial()
	const brokers = 8
	for i := range brokers {
		reg := fixtureCommand(t, "v5_register_broker_request.hex")
		reg.Opaque = opaque.Add(1)
		reg.ExtFields["brokerName"] = "broker-" + strconv.Itoa(i)
		reg.ExtFields["brokerAddr"] = "127.0.0.1:" + strconv.Itoa(20000+i)
		if resp := c.call(reg); resp.Code != remoting.Success {
			t.Fatalf("register broker %d: %d %q", i, resp.Code, resp.Remark)
		}
	}
	if n := src.reads.Load(); n >= brokers {
		t.Errorf("the node source was read %d times for %d brokers: once per registrar", n, brokers)
	}
}

// TestLateExpiryKeepsAFreshRegistration: the janitor finds a broker silent
// past its timeout and unregisters it; the broker registers again just
// then (back from a LAN outage as long as its timeout). The expiry must
// not remove the registration that arrived after it: the gateway held the
// broker's key, not the registration it had found silent, and dropped
// the fresh one from every node until the broker's next period.
func TestLateExpiryKeepsAFreshRegistration(t *testing.T) {
	s := startSite(t, 1, func(c *gateway.Config) { c.BrokerTimeout = time.Second })
	c := s.dial()
	var once sync.Once
	again := make(chan *remoting.Command, 1)
	gateway.SetExpireHook(s.gw, func() {
		once.Do(func() {
			reg := fixtureCommand(t, "v5_register_broker_request.hex")
			reg.Opaque = opaque.Add(1)
			again <- s.dialNoCleanupCall(reg)
		})
	})
	if resp := c.call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	var resp *remoting.Command
	select {
	case resp = <-again:
	case <-time.After(30 * time.Second):
		t.Fatal("the broker was never found silent")
	}
	if resp == nil || resp.Code != remoting.Success {
		t.Fatalf("the registration during the expiry: %+v", resp)
	}
	// Alive from now on: heartbeats until the test ends.
	hb := encode(t, fixtureCommand(t, "v5_broker_heartbeat_oneway.hex"))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				c.nc.Write(hb)
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	nodetest.WaitFor(t, "the broker registered again", func() bool { return registeredEverywhere(t, s.gw, masterAddr) })
	time.Sleep(300 * time.Millisecond) // let a late unregistration land
	if _, ok := localLease(s.nodes[0], masterAddr); !ok {
		t.Errorf("the expiry of the silent registration removed the one that arrived after it from the node")
	}
	if !slices.ContainsFunc(s.gw.Brokers(), func(b gateway.BrokerState) bool { return b.Addr == masterAddr }) {
		t.Errorf("the gateway no longer holds the broker that registered again")
	}
}

// dialNoCleanupCall sends req on a new connection and returns the answer,
// or nil; safe off the test's goroutine.
func (s *site) dialNoCleanupCall(req *remoting.Command) *remoting.Command {
	nc, err := net.Dial("tcp", s.addr)
	if err != nil {
		return nil
	}
	defer nc.Close()
	if _, err := req.WriteTo(nc); err != nil {
		return nil
	}
	nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := remoting.ReadCommand(bufio.NewReader(nc), 0)
	if err != nil {
		return nil
	}
	return resp
}

// TestActingMasterThroughTheGateway: a 5.x group with slaveActingMaster
// loses its master (it unregisters, or goes silent); its slave registers
// again as acting master. Clients reading through the gateway are routed
// to the slave, as id 0, and the master's return takes the id back.
func TestActingMasterThroughTheGateway(t *testing.T) {
	s := startSite(t, 2, nil)
	c := s.dial()
	if resp := c.call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
		t.Fatalf("master: %d %q", resp.Code, resp.Remark)
	}
	if resp := c.call(slaveRequest(t, opaque.Add(1))); resp.Code != remoting.Success || resp.Ext("masterAddr") != masterAddr {
		t.Fatalf("slave: %d %q master %q", resp.Code, resp.Remark, resp.Ext("masterAddr"))
	}
	addrs := func() map[int64]string {
		resp := c.call(goRouteRequest("TopicTest"))
		if resp.Code != remoting.Success {
			return nil
		}
		rd, err := remoting.DecodeTopicRouteData(resp.Body)
		if err != nil || len(rd.BrokerDatas) != 1 {
			return nil
		}
		return rd.BrokerDatas[0].BrokerAddrs
	}
	nodetest.WaitFor(t, "master and slave in the route", func() bool {
		a := addrs()
		return a[0] == masterAddr && a[1] == slaveAddr
	})
	unreg := fixtureCommand(t, "v5_unregister_broker_request.hex")
	if resp := c.call(unreg); resp.Code != remoting.Success {
		t.Fatalf("unregister master: %d %q", resp.Code, resp.Remark)
	}
	acting := slaveRequest(t, opaque.Add(1))
	acting.ExtFields["enableActingMaster"] = "true"
	if resp := c.call(acting); resp.Code != remoting.Success {
		t.Fatalf("acting master: %d %q", resp.Code, resp.Remark)
	}
	nodetest.WaitFor(t, "the slave routed as acting master", func() bool {
		a := addrs()
		return a[0] == slaveAddr && len(a) == 1
	})
	master := fixtureCommand(t, "v5_register_broker_request.hex")
	master.Opaque = opaque.Add(1)
	if resp := c.call(master); resp.Code != remoting.Success {
		t.Fatalf("master back: %d %q", resp.Code, resp.Remark)
	}
	nodetest.WaitFor(t, "the master back at id 0", func() bool { return addrs()[0] == masterAddr })
}

// TestGatewayRestartKeepsTheBrokers: the gateway restarts while its
// brokers stay up. The nodes keep the broker's lease meanwhile (Close does
// not unregister), the broker registers with the new gateway at its next
// period, and clients of the new gateway are routed.
func TestGatewayRestartKeepsTheBrokers(t *testing.T) {
	s := startSite(t, 2, nil)
	if resp := s.dial().call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	nodetest.WaitFor(t, "the lease on every node", func() bool { return registeredEverywhere(t, s.gw, masterAddr) })
	s.gw.Close()
	s.admin.Close() // startGateway's cleanup closes the site's admin server of the time: the new one
	for i, tn := range s.nodes {
		if _, ok := localLease(tn, masterAddr); !ok {
			t.Fatalf("node %d dropped the broker when the gateway stopped", i)
		}
	}
	var addrs []string
	for _, tn := range s.nodes {
		addrs = append(addrs, tn.Addr())
	}
	s.startGateway(addrs, nil)
	c := s.dial()
	// A client asks before the broker's next period: the nodes still
	// route it.
	if resp := c.call(goRouteRequest("TopicTest")); resp.Code != remoting.Success {
		t.Errorf("route through the new gateway before the broker registered with it: %d %q", resp.Code, resp.Remark)
	}
	q := c.call(fixtureCommand(t, "v5_query_data_version_request.hex"))
	if q.Ext("changed") != "true" {
		t.Errorf("QUERY_DATA_VERSION to a gateway that never saw the broker: changed=%q, want true", q.Ext("changed"))
	}
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	reg.Opaque = opaque.Add(1)
	if resp := c.call(reg); resp.Code != remoting.Success {
		t.Fatalf("register with the new gateway: %d %q", resp.Code, resp.Remark)
	}
	nodetest.WaitFor(t, "the new gateway's lease on every node", func() bool { return registeredEverywhere(t, s.gw, masterAddr) })
}

// TestNodeSetChangesAtRunTime: a node joins the list, then the first node
// leaves it. The site's broker registers with the new node, and routes,
// cluster info and health follow the list.
func TestNodeSetChangesAtRunTime(t *testing.T) {
	s := &site{t: t, ca: nodetest.NewCA(t), ops: make(map[*nodetest.Node]*client.Conn)}
	a, b := nodetest.Start(t, s.ca, nil), nodetest.Start(t, s.ca, nil)
	s.nodes = []*nodetest.Node{a, b}
	list := nodes.NewList(a.Addr())
	s.startGateway(nil, func(c *gateway.Config) { c.Nodes, c.NodeRefreshInterval = list, time.Hour })
	c := s.dial()
	if resp := c.call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	if _, ok := localLease(b, masterAddr); ok {
		t.Fatal("a node not listed holds the broker")
	}
	list.Set(a.Addr(), b.Addr())
	nodetest.WaitFor(t, "the broker on the node that joined", func() bool { _, ok := localLease(b, masterAddr); return ok })
	list.Set(b.Addr())
	a.Stop()
	nodetest.WaitFor(t, "the gateway to follow the list", func() bool {
		st := s.gw.Nodes()
		return len(st) == 1 && st[0].Addr == b.Addr() && st[0].Up
	})
	if resp := c.call(goRouteRequest("TopicTest")); resp.Code != remoting.Success {
		t.Errorf("route once only the new node is listed: %d %q", resp.Code, resp.Remark)
	}
	resp := c.call(request(remoting.GetBrokerClusterInfo, nil, nil))
	if ci, err := remoting.DecodeClusterInfo(resp.Body); err != nil || len(ci.BrokerAddrTable) != 1 {
		t.Errorf("cluster info once only the new node is listed: %d %q %v", resp.Code, resp.Remark, err)
	}
	waitHealthz(t, s, http.StatusOK)
}

// TestRegistrationDuringAnUnregistration: a broker restarts: its
// UNREGISTER_BROKER is still crossing a lossy WAN (the gateway goes on
// after the broker gave up waiting) when the new process registers. Both
// reach the nodes in whatever order; the new registration stands, since
// the unregistration names the old registrar's epochs only.
func TestRegistrationDuringAnUnregistration(t *testing.T) {
	s, proxies := startProxiedSite(t, 2, func(c *gateway.Config) { c.RegisterWait = 20 * time.Second })
	if resp := s.dial().call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	nodetest.WaitFor(t, "the lease on every node", func() bool { return registeredEverywhere(t, s.gw, masterAddr) })
	for _, p := range proxies {
		p.SetDropEach(100, 0)
	}
	old := s.dial()
	unreg := fixtureCommand(t, "v5_unregister_broker_request.hex")
	unreg.Opaque = opaque.Add(1)
	old.send(unreg)
	nodetest.WaitFor(t, "the unregistration to start", func() bool { return len(s.gw.Brokers()) == 0 })
	heal := time.AfterFunc(300*time.Millisecond, func() {
		for _, p := range proxies {
			p.SetDropEach(0, 0)
		}
	})
	t.Cleanup(func() { heal.Stop() })
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	reg.Opaque = opaque.Add(1)
	if resp := s.dial().call(reg); resp.Code != remoting.Success {
		t.Fatalf("the new registration: %d %q", resp.Code, resp.Remark)
	}
	old.next()
	nodetest.WaitFor(t, "the new registration on every node", func() bool {
		if !registeredEverywhere(t, s.gw, masterAddr) {
			return false
		}
		for _, tn := range s.nodes {
			if _, ok := localLease(tn, masterAddr); !ok {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // a late unregistration would land now
	for i, tn := range s.nodes {
		if _, ok := localLease(tn, masterAddr); !ok {
			t.Errorf("node %d: the old process's unregistration removed the new registration", i)
		}
	}
}

// TestCloseEndsRegistrationsWaitingForTheNodes: a registration waits (up
// to RegisterWait) for a node's acknowledgement while the WAN is cut; the
// gateway closing ends that wait, so a stop is not held up by it: the
// broker is answered at once.
func TestCloseEndsRegistrationsWaitingForTheNodes(t *testing.T) {
	s, proxies := startProxiedSite(t, 1, func(c *gateway.Config) { c.RegisterWait = time.Hour })
	proxies[0].SetDrop(100)
	c := s.dial()
	c.send(fixtureCommand(t, "v5_register_broker_request.hex"))
	nodetest.WaitFor(t, "the registration to wait", func() bool { return len(s.gw.Brokers()) == 1 })
	s.gw.Close()
	if resp := c.next(); resp.Code == remoting.Success {
		t.Errorf("a registration no node acknowledged was answered SUCCESS after Close")
	}
}
