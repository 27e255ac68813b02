package gateway_test

import (
	"testing"
	"time"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/remoting"
)

// A refusal that stood on another broker's lease does not outlive it. A
// RocketMQ broker moved to another cluster (its group still held in the
// old one) is refused with a conflict; once the old lease is gone, the
// broker's next periodic registration goes through, as a NameServer would
// accept it, instead of the gateway answering "not acknowledged" for the
// rest of its life because the registrar it started gave up.
func TestRefusedRegistrationRetriedAtTheBrokersNextPeriod(t *testing.T) {
	s := startSite(t, 1, func(c *gateway.Config) { c.RegisterWait = 500 * time.Millisecond })
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	name := reg.ExtFields["brokerName"]
	old := &wire.Register{Cluster: "OldCluster", BrokerName: name, Addr: "127.0.0.1:10999",
		Topics: topicConfigs(4, "TopicOld")}
	ack, err := s.operator(s.nodes[0]).Register(nodetest.Context(t), old)
	if err != nil {
		t.Fatal(err)
	}

	c := s.dial()
	if resp := c.call(reg); resp.Code == remoting.Success {
		t.Fatalf("registration of group %q while another cluster holds it: SUCCESS, want the node's conflict", name)
	} else {
		t.Logf("while the old cluster holds the group: %d %q", resp.Code, resp.Remark)
	}
	if err := s.operator(s.nodes[0]).Unregister(nodetest.Context(t),
		&wire.Unregister{Cluster: old.Cluster, Addr: old.Addr, Epoch: ack.Lease.Epoch}); err != nil {
		t.Fatal(err)
	}
	// The broker registers again at its next period (30 s in RocketMQ).
	var last *remoting.Command
	nodetest.WaitFor(t, "the broker's periodic registration to be accepted once the conflict is gone", func() bool {
		reg.Opaque = opaque.Add(1)
		last = c.call(reg)
		return last.Code == remoting.Success
	})
	if _, ok := s.lease(s.nodes[0], masterAddr); !ok {
		t.Errorf("registration answered SUCCESS (%q) but the node holds no lease for %s", last.Remark, masterAddr)
	}
}

// A master that comes back at another address (a new pod, a new host) takes
// its broker id there. The gateway's registrar for the old address, whose
// broker is silent now, must not fight it: before, it heartbeated on for the
// broker timeout (120 s), found its lease dropped, registered the dead
// address as the master again, and the group's master address flipped
// between the live and the dead broker at every heartbeat. A NameServer
// keeps the latest registration of an id (the dead broker re-registers
// nothing); so does the gateway, which drops the old address's registrar.
func TestMasterMovedToANewAddressIsNotFoughtBack(t *testing.T) {
	s := startSite(t, 1, func(c *gateway.Config) { c.HeartbeatInterval = 20 * time.Millisecond })
	c := s.dial()
	old := fixtureCommand(t, "v5_register_broker_request.hex")
	if resp := c.call(old); resp.Code != remoting.Success {
		t.Fatalf("first registration: %d %q", resp.Code, resp.Remark)
	}
	const movedAddr = "127.0.0.1:10931"
	moved := fixtureCommand(t, "v5_register_broker_request.hex")
	moved.ExtFields["brokerAddr"] = movedAddr
	moved.Opaque = opaque.Add(1)
	if resp := c.call(moved); resp.Code != remoting.Success {
		t.Fatalf("registration at the new address: %d %q", resp.Code, resp.Remark)
	}
	// Both registrars heartbeat every 20 ms; 25 heartbeats of the new
	// address on one epoch give the old registrar ample time to fight.
	tn := s.nodes[0]
	epochs := map[uint64]bool{}
	oldSeen := 0
	var first wire.LeaseInfo
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, ok := s.lease(tn, masterAddr); ok {
			oldSeen++
		}
		l, ok := s.lease(tn, movedAddr)
		if !ok {
			continue
		}
		epochs[l.Epoch] = true
		if first.Epoch == 0 {
			first = l
		}
		if l.Epoch == first.Epoch && l.Heartbeats >= first.Heartbeats+25 {
			break
		}
	}
	if len(epochs) != 1 || oldSeen > 1 {
		t.Errorf("the moved master was displaced: %d epochs of %s, and the old address %s held a lease in %d polls",
			len(epochs), movedAddr, masterAddr, oldSeen)
	}
	if l, ok := s.lease(tn, masterAddr); ok {
		t.Errorf("the node holds a lease for the old address again (epoch %d, broker id %d): the gateway re-registered a silent broker over the live one", l.Epoch, l.BrokerID)
	}
	route, ok := s.routeTopics(tn, "TopicTest")
	if !ok || route.Brokers[0].Addrs[wire.MasterID] != movedAddr {
		t.Errorf("route of TopicTest names master %v, want %s", route.Brokers, movedAddr)
	}
	for _, b := range s.gw.Brokers() {
		if b.Addr == masterAddr {
			t.Errorf("the gateway still keeps the old address %s registered", masterAddr)
		}
	}
}

// A broker with forceRegister=false asks QUERY_DATA_VERSION before each
// periodic registration and registers only when told its data changed. A
// NameServer that refused its registration holds no data version for it and
// answers changed=true, so the broker registers again; the gateway, which
// keeps a refused broker's entry to judge its next registration afresh, must
// answer the same, or that next registration never comes: the broker
// believes itself registered for good while no node routes to it.
func TestRefusedBrokerIsToldToRegisterAgain(t *testing.T) {
	s := startSite(t, 1, func(c *gateway.Config) { c.RegisterWait = 500 * time.Millisecond })
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	name := reg.ExtFields["brokerName"]
	old := &wire.Register{Cluster: "OldCluster", BrokerName: name, Addr: "127.0.0.1:10999",
		Topics: topicConfigs(4, "TopicOld")}
	if _, err := s.operator(s.nodes[0]).Register(nodetest.Context(t), old); err != nil {
		t.Fatal(err)
	}
	c := s.dial()
	if resp := c.call(reg); resp.Code == remoting.Success {
		t.Fatalf("registration of group %q while another cluster holds it: SUCCESS, want the node's conflict", name)
	}
	nodetest.WaitFor(t, "every node to refuse the broker", func() bool {
		st := brokerState(t, s.gw, masterAddr)
		return len(st.Nodes) > 0 && st.Nodes[0].Refused != nil
	})
	// The data-version query of the broker's next period, with the data
	// version of the refused registration.
	q := fixtureCommand(t, "v5_query_data_version_request.hex")
	q.Opaque = opaque.Add(1)
	resp := c.call(q)
	if resp.Code != remoting.Success || resp.Ext("changed") != "true" {
		t.Fatalf("QUERY_DATA_VERSION of a broker no node holds: code %d changed=%q body %s, want changed=true",
			resp.Code, resp.Ext("changed"), resp.Body)
	}
}
