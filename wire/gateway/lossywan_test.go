package gateway_test

import (
	"slices"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/lossyudp"
	"github.com/edgereg/edgereg/wire/remoting"
)

// startWANSite is startSite with every node behind a lossy UDP proxy (the
// WAN) and short node timings: a lease of 8 s, scanned every 20 ms.
func startWANSite(t *testing.T, n int) (*site, []*lossyudp.Proxy) {
	t.Helper()
	s := &site{t: t, ca: nodetest.NewCA(t), ops: make(map[*nodetest.Node]*client.Conn)}
	var addrs []string
	var proxies []*lossyudp.Proxy
	for range n {
		tn := nodetest.Start(t, s.ca, func(c *node.Config) {
			c.ScanInterval = 20 * time.Millisecond
			c.HeartbeatInterval, c.ExpiryThreshold = 500*time.Millisecond, 8*time.Second
		})
		p, err := lossyudp.New(tn.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		s.nodes = append(s.nodes, tn)
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr())
	}
	s.startGateway(addrs, func(c *gateway.Config) { c.ProbeInterval = 200 * time.Millisecond })
	return s, proxies
}

// localLease reads a node's lease of addr from its registry.
func localLease(tn *nodetest.Node, addr string) (uint64, bool) {
	for _, l := range tn.Node().Registry().Leases() {
		if l.Addr == addr {
			return l.Epoch, true
		}
	}
	return 0, false
}

// TestGatewayKeepsBrokersOverALossyWAN: a RocketMQ broker registered with
// a gateway whose two nodes sit behind a lossy WAN, with leases of 8 s
// (renewed every second: the registrar follows the nodes' advice). For
// 6 s the WAN drops 30 % of the datagrams toward the nodes and 10 % back
// (asymmetric) and duplicates 10 %; then node 0's link blacks out for
// 3 s, then heals. The broker keeps heartbeating the gateway on its LAN.
// Every node keeps the lease under its first epoch throughout, checked
// every 20 ms.
func TestGatewayKeepsBrokersOverALossyWAN(t *testing.T) {
	t.Parallel() // waits on timers
	s, proxies := startWANSite(t, 2)
	c := s.dial()
	if resp := c.call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	epochs := make([]uint64, len(s.nodes))
	nodetest.WaitFor(t, "the lease on every node", func() bool {
		for i, tn := range s.nodes {
			e, ok := localLease(tn, masterAddr)
			if !ok {
				return false
			}
			epochs[i] = e
		}
		return true
	})
	check := func(phase string) {
		for i, tn := range s.nodes {
			if e, ok := localLease(tn, masterAddr); !ok || e != epochs[i] {
				t.Fatalf("%s: node %d lost the broker's lease (held %v, epoch %d, was %d)", phase, i, ok, e, epochs[i])
			}
		}
	}
	run := func(phase string, d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			c.send(fixtureCommand(t, "v5_broker_heartbeat_oneway.hex"))
			check(phase)
		}
	}
	for _, p := range proxies {
		p.SetDropEach(30, 10)
		p.SetDuplicate(10)
	}
	run("30 % loss toward the nodes, 10 % back", 6*time.Second)
	proxies[0].SetDropEach(100, 100)
	run("node 0 blacked out", 3*time.Second)
	for _, p := range proxies {
		p.SetDropEach(0, 0)
	}
	run("after", time.Second)
	for i, p := range proxies {
		up, down := p.Dropped()
		if up == 0 || down == 0 {
			t.Errorf("proxy %d dropped %d toward the node and %d back: the WAN was not lossy", i, up, down)
		}
		t.Logf("proxy %d: dropped %d toward the node, %d back", i, up, down)
	}
	for _, n := range brokerState(t, s.gw, masterAddr).Nodes {
		t.Logf("gateway's registrar with %s: registered %v, %d heartbeats, %d registrations, %d dials, %d resumes",
			n.Addr, n.Registered, n.Heartbeats, n.Registrations, n.Dials, n.Resumes)
	}
}

// TestUnregisterOutlivesTheBrokersConnection: a RocketMQ broker shutting
// down sends UNREGISTER_BROKER, waits at most 3 s for the answer, and closes
// its connection. With the WAN slow, the gateway's unregistration must go
// on after the connection closed, as a NameServer applies an unregister it
// received whatever becomes of the connection; abandoning it left the dead
// broker routed on every node until its lease expired (120 s).
func TestUnregisterOutlivesTheBrokersConnection(t *testing.T) {
	s := &site{t: t, ca: nodetest.NewCA(t), ops: make(map[*nodetest.Node]*client.Conn)}
	tn := nodetest.Start(t, s.ca, nil) // leases of 120 s: expiry cannot pass for the unregistration
	p, err := lossyudp.New(tn.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s.nodes = []*nodetest.Node{tn}
	s.startGateway([]string{p.Addr()}, func(c *gateway.Config) { c.RequestTimeout, c.UpstreamTimeout = 10*time.Second, 10*time.Second })
	c := s.dial()
	if resp := c.call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	s.onEveryNode("the lease", func(tn *nodetest.Node) bool { _, ok := localLease(tn, masterAddr); return ok })

	p.SetDrop(100) // the WAN stalls
	c.send(fixtureCommand(t, "v5_unregister_broker_request.hex"))
	nodetest.WaitFor(t, "the gateway to take the unregistration", func() bool {
		return !slices.ContainsFunc(s.gw.Brokers(), func(b gateway.BrokerState) bool { return b.Addr == masterAddr })
	})
	c.nc.Close() // the broker's 3 s are up: it closes its connection and exits
	time.Sleep(300 * time.Millisecond)
	p.SetDrop(0) // the WAN comes back
	s.onEveryNode("the unregistered broker gone", func(tn *nodetest.Node) bool { _, ok := localLease(tn, masterAddr); return !ok })
}
