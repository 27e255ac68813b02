package gateway_test

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/remoting"
)

const (
	masterAddr = "127.0.0.1:10911"
	slaveAddr  = "127.0.0.1:10921"
)

// lease returns the lease a node holds for addr in DefaultCluster.
func (s *site) lease(tn *nodetest.Node, addr string) (wire.LeaseInfo, bool) {
	s.t.Helper()
	ls, err := s.operator(tn).Leases(nodetest.Context(s.t))
	if err != nil {
		s.t.Fatal(err)
	}
	for _, l := range ls {
		if l.Cluster == "DefaultCluster" && l.Addr == addr {
			return l, true
		}
	}
	return wire.LeaseInfo{}, false
}

// onEveryNode waits until cond holds on every node.
func (s *site) onEveryNode(what string, cond func(tn *nodetest.Node) bool) {
	s.t.Helper()
	for _, tn := range s.nodes {
		nodetest.WaitFor(s.t, what+" on "+tn.Addr(), func() bool { return cond(tn) })
	}
}

func (s *site) routeTopics(tn *nodetest.Node, topic string) (wire.Route, bool) {
	s.t.Helper()
	r, _, err := s.operator(tn).Route(nodetest.Context(s.t), topic, wire.ClientAttrs{})
	return r, err == nil
}

func brokerState(t *testing.T, gw *gateway.Gateway, addr string) gateway.BrokerState {
	t.Helper()
	for _, b := range gw.Brokers() {
		if b.Addr == addr {
			return b
		}
	}
	t.Fatalf("the gateway holds no broker %s", addr)
	return gateway.BrokerState{}
}

// registrationsAndUpdates sums what the broker's registrar sent to the
// nodes.
func registrationsAndUpdates(b gateway.BrokerState) (regs, updates uint64) {
	for _, n := range b.Nodes {
		regs += n.Registrations
		updates += n.Updates
	}
	return regs, updates
}

// slaveRequest is the fixture's registration as the group's slave sends it.
func slaveRequest(t *testing.T, opaque int32) *remoting.Command {
	req := fixtureCommand(t, "v5_register_broker_request.hex")
	req.ExtFields["brokerId"] = "1"
	req.ExtFields["brokerAddr"] = slaveAddr
	req.ExtFields["haServerAddr"] = "127.0.0.1:10922"
	req.Opaque = opaque
	return req
}

// The 5.x broker fixtures, replayed: the answers are byte for byte a 5.x
// NameServer's, and the broker is on every node, as QUIC readers see it.
func TestBrokerFixtures(t *testing.T) {
	s := startSite(t, 3, nil)
	c := s.dial()

	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	if got, want := encode(t, c.call(reg)), fixture(t, "v5_register_broker_response.hex"); !bytes.Equal(got, want) {
		t.Errorf("REGISTER_BROKER answer to the master\n got %s\nwant %s", got, want)
	}
	s.onEveryNode("the master's lease", func(tn *nodetest.Node) bool { _, ok := s.lease(tn, masterAddr); return ok })
	for _, tn := range s.nodes {
		route, ok := s.routeTopics(tn, "TopicTest")
		if !ok || len(route.Queues) != 1 || route.Queues[0].WriteQueues != 4 || route.Queues[0].Perm != 6 ||
			route.Brokers[0].Addrs[wire.MasterID] != masterAddr {
			t.Errorf("node %s: route of TopicTest %+v", tn.Addr(), route)
		}
	}

	// The slave learns where its master is, from the nodes.
	want := fixture(t, "v5_register_broker_response_to_slave.hex")
	slave := slaveRequest(t, fixtureCommand(t, "v5_register_broker_response_to_slave.hex").Opaque)
	if got := encode(t, c.call(slave)); !bytes.Equal(got, want) {
		t.Errorf("REGISTER_BROKER answer to the slave\n got %s\nwant %s", got, want)
	}
	s.onEveryNode("the slave's lease", func(tn *nodetest.Node) bool { _, ok := s.lease(tn, slaveAddr); return ok })

	// QUERY_DATA_VERSION is answered locally with the version held.
	if got, want := encode(t, c.call(fixtureCommand(t, "v5_query_data_version_request.hex"))),
		fixture(t, "v5_query_data_version_response.hex"); !bytes.Equal(got, want) {
		t.Errorf("QUERY_DATA_VERSION answer\n got %s\nwant %s", got, want)
	}
	// Oneway heartbeats are never answered: the unregister's answer is the
	// next frame on the connection.
	c.send(fixtureCommand(t, "v5_query_data_version_oneway.hex"))
	c.send(fixtureCommand(t, "v5_broker_heartbeat_oneway.hex"))
	unreg := fixtureCommand(t, "v5_unregister_broker_request.hex")
	c.send(unreg)
	if resp := c.next(); resp.Opaque != unreg.Opaque || resp.Code != remoting.Success {
		t.Fatalf("next frame after two oneway requests and UNREGISTER_BROKER: opaque %d code %d %q", resp.Opaque, resp.Code, resp.Remark)
	}
	if n := s.metric(`edgereg_gateway_requests_total{code="904",response="none"}`); n != 1 {
		t.Errorf("oneway heartbeats counted %v", n)
	}
	s.onEveryNode("the master gone", func(tn *nodetest.Node) bool { _, ok := s.lease(tn, masterAddr); return !ok })
	for _, tn := range s.nodes {
		if _, ok := s.lease(tn, slaveAddr); !ok {
			t.Errorf("node %s lost the slave with the master's unregistration", tn.Addr())
		}
	}
}

// A 30 s re-registration with nothing changed sends nothing over the WAN
// (the registrar's heartbeats renew the leases); a partial registration, or
// a chunk of a split one, adds its topics and keeps the others.
func TestRegistrationUpserts(t *testing.T) {
	s := startSite(t, 2, nil)
	c := s.dial()
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	if resp := c.call(reg); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	nodetest.WaitFor(t, "registration on every node", func() bool {
		regs, _ := registrationsAndUpdates(brokerState(t, s.gw, masterAddr))
		return regs == 2
	})
	for range 3 {
		reg.Opaque = opaque.Add(1)
		if resp := c.call(reg); resp.Code != remoting.Success {
			t.Fatalf("re-register: %d %q", resp.Code, resp.Remark)
		}
	}
	if regs, updates := registrationsAndUpdates(brokerState(t, s.gw, masterAddr)); regs != 2 || updates != 0 {
		t.Errorf("unchanged re-registrations sent %d registrations and %d updates, want 2 and 0", regs, updates)
	}

	// A partial registration (one created topic), then a chunk: both upsert.
	body, err := remoting.DecodeRegisterBrokerBody(reg.Body, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range [][]string{{"created"}, {"chunk_a", "chunk_b"}} {
		body.TopicConfigTable = map[string]remoting.TopicConfig{}
		for _, name := range chunk {
			body.TopicConfigTable[name] = remoting.TopicConfig{TopicName: name, ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6, TopicFilterType: "SINGLE_TAG"}
		}
		body.DataVersion.Counter++
		partial := request(remoting.RegisterBroker, maps(reg.ExtFields), body.EncodeJSON())
		partial.ExtFields["bodyCrc32"] = strconv.Itoa(int(remoting.BodyCRC32(partial.Body)))
		if resp := c.call(partial); resp.Code != remoting.Success {
			t.Fatalf("partial register %v: %d %q", chunk, resp.Code, resp.Remark)
		}
	}
	for _, topic := range []string{"TopicTest", "orders", "created", "chunk_a", "chunk_b"} {
		s.onEveryNode("topic "+topic, func(tn *nodetest.Node) bool { _, ok := s.routeTopics(tn, topic); return ok })
	}
	// QUERY_DATA_VERSION now says "changed" for the version the fixture
	// names, since the broker registered a newer one.
	q := fixtureCommand(t, "v5_query_data_version_request.hex")
	if resp := c.call(q); resp.Ext("changed") != "true" {
		t.Errorf("QUERY_DATA_VERSION after a newer registration: %q", resp.Ext("changed"))
	}
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Bad registrations get SYSTEM_ERROR with a reason and lose nothing: the
// broker registered before keeps its topics on every node.
func TestBadRegistrations(t *testing.T) {
	s := startSite(t, 2, nil)
	c := s.dial()
	good := fixtureCommand(t, "v5_register_broker_request.hex")
	if resp := c.call(good); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	s.onEveryNode("TopicTest", func(tn *nodetest.Node) bool { _, ok := s.routeTopics(tn, "TopicTest"); return ok })

	crc := request(remoting.RegisterBroker, maps(good.ExtFields), good.Body)
	crc.ExtFields["bodyCrc32"] = "12345"
	noName := request(remoting.RegisterBroker, maps(good.ExtFields), good.Body)
	delete(noName.ExtFields, "brokerName")
	garbage := request(remoting.RegisterBroker, maps(good.ExtFields), []byte(`{"topicConfigSerializeWrapper":`))
	garbage.ExtFields["bodyCrc32"] = "0"
	deflated := request(remoting.RegisterBroker, maps(good.ExtFields), fixture(t, "v5_register_broker_body_compressed.hex"))
	deflated.ExtFields["bodyCrc32"] = "0" // a 5.x broker with compressedRegister: compressed=false, deflated body
	// A first registration holding a single topic can only be partial.
	body, _ := remoting.DecodeRegisterBrokerBody(good.Body, false, 0)
	body.TopicConfigTable = map[string]remoting.TopicConfig{"solo": {TopicName: "solo", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}}
	partial := request(remoting.RegisterBroker, maps(good.ExtFields), body.EncodeJSON())
	partial.ExtFields["bodyCrc32"] = "0"
	partial.ExtFields["brokerAddr"] = "127.0.0.1:20911"
	for name, req := range map[string]*remoting.Command{"bad crc": crc, "no broker name": noName,
		"truncated body": garbage, "deflated body marked uncompressed": deflated, "partial first registration": partial} {
		resp := c.call(req)
		if resp.Code != remoting.SystemError || resp.Remark == "" {
			t.Errorf("%s: answered %d %q, want SYSTEM_ERROR with a reason", name, resp.Code, resp.Remark)
		}
	}
	if resp := c.call(crc); resp.Remark != "crc32 not match" {
		t.Errorf("bad crc remark %q", resp.Remark)
	}
	for _, tn := range s.nodes {
		if _, ok := s.routeTopics(tn, "TopicTest"); !ok {
			t.Errorf("node %s lost TopicTest after bad registrations", tn.Addr())
		}
		if _, ok := s.lease(tn, "127.0.0.1:20911"); ok {
			t.Errorf("node %s holds the broker of a partial first registration", tn.Addr())
		}
	}
	if n := len(s.gw.Brokers()); n != 1 {
		t.Errorf("gateway holds %d brokers, want 1", n)
	}
}

// A broker that goes silent is unregistered from every node after its
// timeout; BROKER_HEARTBEAT keeps it alive meanwhile without reaching the
// nodes.
func TestSilentBrokerExpires(t *testing.T) {
	s := startSite(t, 2, func(c *gateway.Config) { c.BrokerTimeout = 2 * time.Second })
	c := s.dial()
	if resp := c.call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	s.onEveryNode("the lease", func(tn *nodetest.Node) bool { _, ok := s.lease(tn, masterAddr); return ok })
	// Heartbeats for longer than the timeout keep it.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		c.send(fixtureCommand(t, "v5_broker_heartbeat_oneway.hex"))
	}
	if len(s.gw.Brokers()) != 1 {
		t.Fatal("a heartbeating broker expired")
	}
	beats0 := brokerState(t, s.gw, masterAddr)
	// Then silence.
	s.onEveryNode("the lease gone", func(tn *nodetest.Node) bool { _, ok := s.lease(tn, masterAddr); return !ok })
	if len(s.gw.Brokers()) != 0 {
		t.Error("the gateway still holds the expired broker")
	}
	// The 30 heartbeats renewed nothing on the nodes: one registration per
	// node, no update, no heartbeat (the registrar's own are 30 s apart).
	regs, updates := registrationsAndUpdates(beats0)
	var beats uint64
	for _, n := range beats0.Nodes {
		beats += n.Heartbeats
	}
	if regs != 2 || updates != 0 || beats != 0 {
		t.Errorf("while the broker heartbeated the gateway sent %d registrations, %d updates, %d heartbeats; want 2, 0, 0", regs, updates, beats)
	}
}

// With UnregisterOnClose the broker is unregistered as soon as its
// connection closes, as a NameServer does; without it, it stays.
func TestUnregisterOnClose(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(strconv.FormatBool(on), func(t *testing.T) {
			s := startSite(t, 2, func(c *gateway.Config) { c.UnregisterOnClose = on })
			c := s.dial()
			if resp := c.call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
				t.Fatalf("register: %d %q", resp.Code, resp.Remark)
			}
			s.onEveryNode("the lease", func(tn *nodetest.Node) bool { _, ok := s.lease(tn, masterAddr); return ok })
			c.nc.Close()
			if on {
				s.onEveryNode("the lease gone", func(tn *nodetest.Node) bool { _, ok := s.lease(tn, masterAddr); return !ok })
				return
			}
			// Closing is seen by the server at once; a request on a new
			// connection is served after it, and the broker is still there.
			c2 := s.dial()
			c2.call(request(4242, nil, nil))
			if !slices.ContainsFunc(s.gw.Brokers(), func(b gateway.BrokerState) bool { return b.Addr == masterAddr }) {
				t.Error("broker dropped on close without UnregisterOnClose")
			}
		})
	}
}

// A registration no node acknowledges is not answered SUCCESS: the broker
// hears why and registers again at its next period, and once a node is
// back the gateway's registrar has registered it there meanwhile.
func TestRegistrationNotAcknowledged(t *testing.T) {
	s := startSite(t, 1, func(c *gateway.Config) { c.RegisterWait = 500 * time.Millisecond })
	s.nodes[0].Stop()
	c := s.dial()
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	resp := c.call(reg)
	if resp.Code != remoting.SystemError || !strings.Contains(resp.Remark, "no node has acknowledged") {
		t.Fatalf("registration with the node down: %d %q, want SYSTEM_ERROR saying no node acknowledged it", resp.Code, resp.Remark)
	}
	s.nodes[0].Start()
	s.onEveryNode("the lease, registered by the gateway's retries", func(tn *nodetest.Node) bool {
		_, ok := s.lease(tn, masterAddr)
		return ok
	})
	// The node holds the lease a moment before the registrar has read its
	// acknowledgement, which is what the gateway answers by.
	nodetest.WaitFor(t, "the gateway's registrar to hold the acknowledgement", func() bool {
		for _, b := range s.gw.Brokers() {
			for _, n := range b.Nodes {
				if n.Registered {
					return true
				}
			}
		}
		return false
	})
	reg.Opaque = opaque.Add(1)
	if resp := c.call(reg); resp.Code != remoting.Success {
		t.Fatalf("registration with the node back: %d %q", resp.Code, resp.Remark)
	}
}

// Broker requests missing the fields that name the broker get SYSTEM_ERROR
// with the field's name; an undecodable data version reads as changed, so
// the broker registers in full rather than trusting it.
func TestBadBrokerRequests(t *testing.T) {
	s := startSite(t, 1, nil)
	c := s.dial()
	if resp := c.call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	for _, code := range []int16{remoting.QueryDataVersion, remoting.UnregisterBroker} {
		resp := c.call(request(code, map[string]string{"brokerName": "broker-a", "clusterName": "DefaultCluster"}, nil))
		if resp.Code != remoting.SystemError || !strings.Contains(resp.Remark, "brokerAddr") {
			t.Errorf("code %d without brokerAddr: %d %q", code, resp.Code, resp.Remark)
		}
	}
	q := fixtureCommand(t, "v5_query_data_version_request.hex")
	q.Body = []byte("{not json")
	if resp := c.call(q); resp.Code != remoting.Success || resp.Ext("changed") != "true" {
		t.Errorf("garbage data version: %d %q changed=%q", resp.Code, resp.Remark, resp.Ext("changed"))
	}
	if len(s.gw.Brokers()) != 1 {
		t.Error("bad requests cost the broker its registration")
	}
}

func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]gateway.Config{
		"no nodes": {TLS: nodetest.NewCA(t).TLS(t, "broker", "gw")},
		"no TLS":   {Nodes: nodes.Static("127.0.0.1:1")},
	} {
		if _, err := gateway.New(cfg); !errors.Is(err, gateway.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// A 4.9-style compressed registration (zlib body, compressed=true, CRC of
// the compressed bytes) registers the broker as the JSON one does, and a
// request with the ROCKETMQ binary header is answered too.
func TestCompressedRegistrationAndBinaryHeader(t *testing.T) {
	s := startSite(t, 2, nil)
	c := s.dial()
	body := fixture(t, "v5_register_broker_body_compressed.hex")
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	reg.Body = body
	reg.ExtFields["compressed"] = "true"
	reg.ExtFields["bodyCrc32"] = strconv.Itoa(int(remoting.BodyCRC32(body)))
	reg.SerializeType = remoting.SerializeRocketMQ
	if resp := c.call(reg); resp.Code != remoting.Success {
		t.Fatalf("compressed registration: %d %q", resp.Code, resp.Remark)
	}
	s.onEveryNode("TopicTest", func(tn *nodetest.Node) bool {
		r, ok := s.routeTopics(tn, "TopicTest")
		return ok && r.Queues[0].WriteQueues == 4
	})
}
