package gateway_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/remoting"
)

// brokerRegs sends the master's registrations as a 5.x broker does: the
// fixture's header and topics, with the table and data version changed.
type brokerRegs struct {
	t    *testing.T
	c    *rmqConn
	ext  map[string]string
	body *remoting.RegisterBrokerBody
}

func newBrokerRegs(t *testing.T, c *rmqConn) *brokerRegs {
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	body, err := remoting.DecodeRegisterBrokerBody(reg.Body, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &brokerRegs{t: t, c: c, ext: reg.ExtFields, body: body}
}

// send registers table (names of the fixture's topics, or new ones with
// 2 queues) at data version counter.
func (b *brokerRegs) send(counter int64, names ...string) {
	b.t.Helper()
	full := b.body.TopicConfigTable
	table := make(map[string]remoting.TopicConfig, len(names))
	for _, n := range names {
		tc, ok := full[n]
		if !ok {
			tc = remoting.TopicConfig{TopicName: n, ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6, TopicFilterType: "SINGLE_TAG"}
		}
		table[n] = tc
	}
	body := *b.body
	body.TopicConfigTable = table
	body.DataVersion.Counter = counter
	req := request(remoting.RegisterBroker, maps(b.ext), body.EncodeJSON())
	req.ExtFields["bodyCrc32"] = strconv.Itoa(int(remoting.BodyCRC32(req.Body)))
	if resp := b.c.call(req); resp.Code != remoting.Success {
		b.t.Fatalf("register %v at version %d: %d %q", names, counter, resp.Code, resp.Remark)
	}
}

// mqadmin deleteTopic deletes the topic on the broker (a new data version)
// and sends DELETE_TOPIC_IN_NAMESRV, which the gateway refuses: the
// broker's next full registrations no longer list it. The gateway removes
// it from every node once a whole round of the broker's registrations at
// that version went by without it, and a node that restarts does not get
// it back from the gateway.
func TestTopicDeletedOnBrokerLeavesNodes(t *testing.T) {
	gateway.SetRoundGap(t, 100*time.Millisecond)
	s := startSite(t, 2, nil)
	b := newBrokerRegs(t, s.dial())
	b.send(3, "TopicTest", "orders", "TBW102", "doomed")
	s.onEveryNode("topic doomed", func(tn *nodetest.Node) bool { _, ok := s.routeTopics(tn, "doomed"); return ok })

	b.send(4, "TopicTest", "orders", "TBW102")
	time.Sleep(200 * time.Millisecond) // the broker's next period
	b.send(4, "TopicTest", "orders", "TBW102")
	s.onEveryNode("doomed removed", func(tn *nodetest.Node) bool { _, ok := s.routeTopics(tn, "doomed"); return !ok })
	if n := brokerState(t, s.gw, masterAddr).Topics; n != 3 {
		t.Errorf("the gateway holds %d topics of the broker, want 3", n)
	}

	s.nodes[0].Restart()
	s.onEveryNode("TopicTest after a node restart", func(tn *nodetest.Node) bool {
		_, ok := s.routeTopics(tn, "TopicTest")
		return ok
	})
	if _, ok := s.routeTopics(s.nodes[0], "doomed"); ok {
		t.Errorf("the restarted node routes the deleted topic again")
	}
}

// Registrations that list only part of the table remove nothing, however
// they repeat: a topic creation (partial), sent twice within the broker's
// period (a NameServer address listed twice), and the chunks of a split
// registration.
func TestPartialRegistrationsRemoveNothing(t *testing.T) {
	s := startSite(t, 1, nil)
	b := newBrokerRegs(t, s.dial())
	b.send(3, "TopicTest", "orders", "TBW102", "a", "b")
	b.send(4, "created")
	b.send(4, "created")
	b.send(4, "TopicTest", "orders")
	b.send(4, "TBW102", "a", "b", "created")
	b.send(4, "TopicTest", "orders")
	if n := brokerState(t, s.gw, masterAddr).Topics; n != 6 {
		t.Errorf("the gateway holds %d topics of the broker, want 6", n)
	}
	for _, topic := range []string{"TopicTest", "orders", "TBW102", "a", "b", "created"} {
		s.onEveryNode("topic "+topic, func(tn *nodetest.Node) bool { _, ok := s.routeTopics(tn, topic); return ok })
	}
}

// A topic an operator deleted on the nodes and then created again on the
// broker with the same settings (a partial registration with a new data
// version) is routed again, as a NameServer routes every topic a
// registration lists.
func TestTopicRecreatedOnBrokerIsRoutedAgain(t *testing.T) {
	s := startSite(t, 2, nil)
	b := newBrokerRegs(t, s.dial())
	b.send(3, "TopicTest", "orders", "TBW102", "again")
	s.onEveryNode("topic again", func(tn *nodetest.Node) bool { _, ok := s.routeTopics(tn, "again"); return ok })
	for _, tn := range s.nodes {
		if err := s.operator(tn).DeleteTopic(nodetest.Context(t), "again"); err != nil {
			t.Fatal(err)
		}
	}
	s.onEveryNode("again deleted", func(tn *nodetest.Node) bool { _, ok := s.routeTopics(tn, "again"); return !ok })

	b.send(4, "again")
	s.onEveryNode("topic again recreated", func(tn *nodetest.Node) bool {
		r, ok := s.routeTopics(tn, "again")
		return ok && len(r.Queues) == 1 && r.Queues[0].WriteQueues == 2
	})
}

// A split registration's chunks make one round: a chunk listed again a
// period later removes only what no chunk listed.
func TestSplitRegistrationRoundIsEveryChunk(t *testing.T) {
	gateway.SetRoundGap(t, 100*time.Millisecond)
	s := startSite(t, 1, nil)
	b := newBrokerRegs(t, s.dial())
	b.send(3, "TopicTest", "orders", "TBW102", "a", "doomed")
	b.send(4, "TopicTest", "orders")
	b.send(4, "TBW102", "a")
	time.Sleep(200 * time.Millisecond) // the broker's next period
	b.send(4, "TopicTest", "orders")
	if n := brokerState(t, s.gw, masterAddr).Topics; n != 4 {
		t.Errorf("the gateway holds %d topics of the broker, want 4", n)
	}
	s.onEveryNode("doomed removed", func(tn *nodetest.Node) bool { _, ok := s.routeTopics(tn, "doomed"); return !ok })
	for _, topic := range []string{"TopicTest", "orders", "TBW102", "a"} {
		if _, ok := s.routeTopics(s.nodes[0], topic); !ok {
			t.Errorf("topic %s of the first round's other chunk is gone", topic)
		}
	}
}
