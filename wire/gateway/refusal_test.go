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
