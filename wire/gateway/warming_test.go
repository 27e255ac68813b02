package gateway_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/remoting"
)

// TestPolledReadsPreferReadyNodes: the node the gateway would ask first (the
// lowest address) restarted and is warming up, empty, while the other still
// holds the broker. Cluster info, topic lists and member groups have no
// warming-up status of their own (a node answers them from what it holds),
// so the gateway must ask a ready node first: else it serves the restarted
// node's empty tables (mqadmin clusterList shows no broker, a 5.x acting
// master reads its group as empty) until that node's warm-up ends.
func TestPolledReadsPreferReadyNodes(t *testing.T) {
	s := &site{t: t, ca: nodetest.NewCA(t), ops: make(map[*nodetest.Node]*client.Conn)}
	warm := make([]bool, 2)
	for i := range 2 {
		s.nodes = append(s.nodes, nodetest.Start(t, s.ca, func(c *node.Config) {
			if warm[i] {
				c.WarmUp = time.Hour
			}
		}))
	}
	s.registerQUIC(orders(4))
	first := 0
	if s.nodes[1].Addr() < s.nodes[0].Addr() {
		first = 1
	}
	warm[first] = true
	delete(s.ops, s.nodes[first])
	s.nodes[first].Restart()
	s.startGateway([]string{s.nodes[0].Addr(), s.nodes[1].Addr()}, nil)
	nodetest.WaitFor(t, "the gateway to probe both nodes", func() bool {
		return s.metric(`edgereg_gateway_upstream_up{node="`+s.nodes[0].Addr()+`"}`) == 1 &&
			s.metric(`edgereg_gateway_upstream_up{node="`+s.nodes[1].Addr()+`"}`) == 1
	})
	c := s.dial()

	resp := c.call(request(remoting.GetBrokerClusterInfo, nil, nil))
	ci, err := remoting.DecodeClusterInfo(resp.Body)
	if resp.Code != remoting.Success || err != nil || ci.BrokerAddrTable["broker-a"].BrokerAddrs[0] != "127.0.0.1:10911" {
		t.Errorf("cluster info: %d %q %+v %v; want broker-a, which the ready node holds", resp.Code, resp.Remark, ci, err)
	}
	if got := topicList(t, c.call(request(remoting.GetAllTopicListFromNameSrv, nil, nil))); !slices.Contains(got, "orders") {
		t.Errorf("all topics %v; want orders, which the ready node holds", got)
	}
	mg := request(remoting.GetBrokerMemberGroup, map[string]string{"clusterName": "DefaultCluster", "brokerName": "broker-a"}, nil)
	resp = c.call(mg)
	group, err := remoting.DecodeBrokerMemberGroup(resp.Body)
	if resp.Code != remoting.Success || err != nil || group.BrokerAddrs[0] != "127.0.0.1:10911" {
		t.Errorf("member group: %d %q %+v %v; want the master, which the ready node holds", resp.Code, resp.Remark, group, err)
	}
}

// TestPolledReadsAfterARestartBeforeTheNextProbe: the node asked first
// restarts (empty, warming up) between two of the gateway's probes. The
// next poll fails on the old connection and is answered by the other node;
// the poll after it must not dial the restarted node as if it were still
// the node that answered, and cache its empty tables.
func TestPolledReadsAfterARestartBeforeTheNextProbe(t *testing.T) {
	s := &site{t: t, ca: nodetest.NewCA(t), ops: make(map[*nodetest.Node]*client.Conn)}
	warm := make([]bool, 2)
	for i := range 2 {
		s.nodes = append(s.nodes, nodetest.Start(t, s.ca, func(c *node.Config) {
			if warm[i] {
				c.WarmUp = time.Hour
			}
		}))
	}
	s.registerQUIC(orders(4))
	first := 0
	if s.nodes[1].Addr() < s.nodes[0].Addr() {
		first = 1
	}
	s.startGateway([]string{s.nodes[0].Addr(), s.nodes[1].Addr()}, func(c *gateway.Config) { c.ProbeInterval = time.Hour })
	nodetest.WaitFor(t, "the gateway to probe both nodes", func() bool {
		return s.metric(`edgereg_gateway_upstream_up{node="`+s.nodes[0].Addr()+`"}`) == 1 &&
			s.metric(`edgereg_gateway_upstream_up{node="`+s.nodes[1].Addr()+`"}`) == 1
	})
	c := s.dial()
	clusterHasBroker := func(phase string) {
		t.Helper()
		resp := c.call(request(remoting.GetBrokerClusterInfo, nil, nil))
		ci, err := remoting.DecodeClusterInfo(resp.Body)
		if resp.Code != remoting.Success || err != nil || ci.BrokerAddrTable["broker-a"].BrokerAddrs[0] != "127.0.0.1:10911" {
			t.Fatalf("%s: cluster info: %d %q %+v %v; want broker-a, which the ready node holds", phase, resp.Code, resp.Remark, ci, err)
		}
	}
	clusterHasBroker("before the restart")
	warm[first] = true
	delete(s.ops, s.nodes[first])
	s.nodes[first].Restart()
	for i := range 20 { // each read past the 50 ms poll interval starts a poll
		time.Sleep(60 * time.Millisecond)
		clusterHasBroker(fmt.Sprintf("read %d after the restart", i))
	}
}
