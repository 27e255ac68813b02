package gateway_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire/remoting"
)

func topicList(t *testing.T, resp *remoting.Command) []string {
	t.Helper()
	if resp.Code != remoting.Success {
		t.Fatalf("topic list: %d %q", resp.Code, resp.Remark)
	}
	l, err := remoting.DecodeTopicList(resp.Body)
	if err != nil {
		t.Fatalf("topic list body %s: %v", resp.Body, err)
	}
	return l.TopicList
}

// Cluster info, topic lists and member groups come from the nodes the
// first time, from the cache after, and from the cache while the nodes are
// unreachable.
func TestPolledReads(t *testing.T) {
	s := startSite(t, 2, nil)
	s.registerQUIC(orders(4))
	c := s.dial()

	all := request(remoting.GetAllTopicListFromNameSrv, nil, nil)
	if got := topicList(t, c.call(all)); !slices.Equal(got, []string{"TBW102", "orders"}) {
		t.Errorf("all topics %v", got)
	}
	byCluster := request(remoting.GetTopicsByCluster, map[string]string{"cluster": "DefaultCluster"}, nil)
	if got := topicList(t, c.call(byCluster)); !slices.Equal(got, []string{"TBW102", "orders"}) {
		t.Errorf("topics of DefaultCluster %v", got)
	}
	unknown := request(remoting.GetTopicsByCluster, map[string]string{"cluster": "nosuch"}, nil)
	if got := topicList(t, c.call(unknown)); len(got) != 0 {
		t.Errorf("topics of an unknown cluster %v", got)
	}
	// A NameServer reads a missing cluster as null and finds no topics for
	// it (REMOTING.md §1.2), as a node's listener answers.
	missing := request(remoting.GetTopicsByCluster, nil, nil)
	if resp := c.call(missing); resp.Code != remoting.Success || string(resp.Body) != `{"topicList":[]}` {
		t.Errorf("topics by cluster without a cluster: %d %q %s", resp.Code, resp.Remark, resp.Body)
	}

	// The system topic list names a broker, as a NameServer's does: Java
	// admin tools ask that broker for its own system topics.
	system := c.call(request(remoting.GetSystemTopicListFromNS, nil, nil))
	if sl, err := remoting.DecodeTopicList(system.Body); err != nil || sl.BrokerAddr != "127.0.0.1:10911" ||
		!slices.Equal(sl.TopicList, []string{"DefaultCluster", "TBW102", "broker-a"}) {
		t.Errorf("system topics: %s %v", system.Body, err)
	}

	resp := c.call(request(remoting.GetBrokerClusterInfo, nil, nil))
	ci, err := remoting.DecodeClusterInfo(resp.Body)
	if resp.Code != remoting.Success || err != nil {
		t.Fatalf("cluster info: %d %q %v", resp.Code, resp.Remark, err)
	}
	if ci.BrokerAddrTable["broker-a"].BrokerAddrs[0] != "127.0.0.1:10911" || !slices.Equal(ci.ClusterAddrTable["DefaultCluster"], []string{"broker-a"}) {
		t.Errorf("cluster info %+v", ci)
	}

	mg := request(remoting.GetBrokerMemberGroup, map[string]string{"clusterName": "DefaultCluster", "brokerName": "broker-a"}, nil)
	resp = c.call(mg)
	group, err := remoting.DecodeBrokerMemberGroup(resp.Body)
	if resp.Code != remoting.Success || err != nil || group.BrokerAddrs[0] != "127.0.0.1:10911" {
		t.Fatalf("member group: %d %q %+v %v", resp.Code, resp.Remark, group, err)
	}

	for _, tn := range s.nodes {
		tn.Stop()
	}
	nodetest.WaitFor(t, "the gateway to see every node down", func() bool {
		resp, err := http.Get(s.admin.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	all.Opaque = opaque.Add(1)
	if got := topicList(t, c.call(all)); !slices.Equal(got, []string{"TBW102", "orders"}) {
		t.Errorf("all topics while the nodes are down: %v", got)
	}
	if resp := c.call(request(remoting.GetBrokerClusterInfo, nil, nil)); resp.Code != remoting.Success {
		t.Errorf("cluster info while the nodes are down: %d %q", resp.Code, resp.Remark)
	}
	if hits := s.metric(`edgereg_gateway_polled_reads_total{kind="topics",result="hit"}`); hits < 1 {
		t.Errorf("%v topic list hits", hits)
	}
	if up := s.metric(`edgereg_gateway_upstream_up{node="` + s.nodes[0].Addr() + `"}`); up != 0 {
		t.Errorf("upstream_up of a stopped node: %v", up)
	}
}

// TestMemberGroupWithoutNames: GET_BROKER_MEMBER_GROUP without clusterName
// or brokerName is answered as a NameServer (and a node's listener) answers
// it, SUCCESS with an empty group, not SYSTEM_ERROR from a node's refusal
// of an empty name.
func TestMemberGroupWithoutNames(t *testing.T) {
	s := startSite(t, 1, nil)
	s.registerQUIC(orders(4))
	c := s.dial()
	for _, ext := range []map[string]string{nil, {"brokerName": "broker-a"}, {"clusterName": "DefaultCluster"}} {
		resp := c.call(request(remoting.GetBrokerMemberGroup, ext, nil))
		want := `{"brokerMemberGroup":{"brokerAddrs":{},"brokerName":"` + ext["brokerName"] + `","cluster":"` + ext["clusterName"] + `"}}`
		if resp.Code != remoting.Success || string(resp.Body) != want {
			t.Errorf("member group of %v: code %d %q %s, want SUCCESS %s", ext, resp.Code, resp.Remark, resp.Body, want)
		}
	}
}

// TestLookupsByNamesNoNodeHolds: GET_TOPICS_BY_CLUSTER and
// GET_BROKER_MEMBER_GROUP by a name no broker can have (too long, a control
// character) find nothing, as a NameServer and a node's listener answer,
// rather than relaying the nodes' refusal of the name as SYSTEM_ERROR.
func TestLookupsByNamesNoNodeHolds(t *testing.T) {
	s := startSite(t, 1, nil)
	s.registerQUIC(orders(4))
	c := s.dial()
	for _, name := range []string{strings.Repeat("x", 300), "a\x00b"} {
		resp := c.call(request(remoting.GetTopicsByCluster, map[string]string{"cluster": name}, nil))
		if resp.Code != remoting.Success || string(resp.Body) != `{"topicList":[]}` {
			t.Errorf("topics of cluster %q: code %d %q %s", name, resp.Code, resp.Remark, resp.Body)
		}
		resp = c.call(request(remoting.GetBrokerMemberGroup, map[string]string{"clusterName": "DefaultCluster", "brokerName": name}, nil))
		if g, err := remoting.DecodeBrokerMemberGroup(resp.Body); resp.Code != remoting.Success || err != nil || len(g.BrokerAddrs) != 0 {
			t.Errorf("member group %q: code %d %q %s", name, resp.Code, resp.Remark, resp.Body)
		}
	}
}
