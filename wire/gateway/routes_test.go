package gateway_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/remoting"
)

func orders(queues uint32) *wire.Register {
	return &wire.Register{Cluster: "DefaultCluster", BrokerName: "broker-a", Addr: "127.0.0.1:10911",
		HAAddr: "127.0.0.1:10912", DataVersion: wire.DataVersion{Counter: uint64(queues)}, Topics: topicConfigs(queues, "orders", "TBW102")}
}

func decodeRoute(t *testing.T, resp *remoting.Command) *remoting.TopicRouteData {
	t.Helper()
	if resp.Code != remoting.Success {
		t.Fatalf("route answer: code %d %q", resp.Code, resp.Remark)
	}
	rd, err := remoting.DecodeTopicRouteData(resp.Body)
	if err != nil {
		t.Fatalf("route body %s: %v", resp.Body, err)
	}
	return rd
}

// A route read is answered from the nodes the first time and from the
// watched cache after, in the dialect the client's version asks for, and a
// route change is pushed into the cache.
func TestRouteCachedAndPushed(t *testing.T) {
	s := startSite(t, 2, nil)
	s.registerQUIC(orders(4))
	c := s.dial()

	resp := c.call(goRouteRequest("orders"))
	rd := decodeRoute(t, resp)
	if len(rd.QueueDatas) != 1 || rd.QueueDatas[0].WriteQueueNums != 4 || rd.BrokerDatas[0].BrokerAddrs[0] != "127.0.0.1:10911" {
		t.Fatalf("route %+v", rd)
	}
	// rocketmq-client-go (version 317) gets the legacy dialect, with no
	// whitespace: its hand-written parser keeps any space it finds.
	if !bytes.Contains(resp.Body, []byte(`"brokerAddrs":{0:"127.0.0.1:10911"}`)) {
		t.Errorf("route body for a Go client: %s", resp.Body)
	}
	java := goRouteRequest("orders")
	java.Language, java.Version = "JAVA", remoting.V5_3_3
	if body := c.call(java).Body; !bytes.Contains(body, []byte(`"brokerAddrs":{"0":"127.0.0.1:10911"}`)) {
		t.Errorf("route body for a 5.x Java client: %s", body)
	}
	if miss := s.metric(`edgereg_gateway_route_reads_total{result="miss"}`); miss != 1 {
		t.Errorf("%v misses, want 1 (the first read)", miss)
	}
	if hit := s.metric(`edgereg_gateway_route_reads_total{result="hit"}`); hit != 1 {
		t.Errorf("%v hits, want 1", hit)
	}

	// A change on the nodes reaches the cache by the watch (the route
	// client's own refresh runs every 30 s).
	s.registerQUIC(orders(8))
	nodetest.WaitFor(t, "the route change to reach the gateway", func() bool {
		return decodeRoute(t, c.call(goRouteRequest("orders"))).QueueDatas[0].WriteQueueNums == 8
	})
	if ev := s.metric("edgereg_gateway_route_events_total"); ev < 1 {
		t.Errorf("%v route events, want at least 1", ev)
	}
	if got := s.metric(`edgereg_gateway_requests_total{code="105",response="0"}`); got < 3 {
		t.Errorf("requests metric: %v", got)
	}
}

// A topic no node knows is TOPIC_NOT_EXIST, byte for byte as a 5.x
// NameServer answers it; so is a name no broker could hold.
func TestTopicNotExist(t *testing.T) {
	s := startSite(t, 2, nil)
	want := fixture(t, "v5_get_route_response_topic_not_exist.hex")
	wantCmd := fixtureCommand(t, "v5_get_route_response_topic_not_exist.hex")
	req := fixtureCommand(t, "v5_java_client_get_route_request.hex")
	req.Opaque = wantCmd.Opaque
	req.ExtFields["topic"] = "nosuch" // the fixture's answer names it
	c := s.dial()
	if got := encode(t, c.call(req)); !bytes.Equal(got, want) {
		t.Errorf("TOPIC_NOT_EXIST answer\n got %s\nwant %s", got, want)
	}
	for _, topic := range []string{"", "bad topic", "x/y"} {
		if resp := c.call(goRouteRequest(topic)); resp.Code != remoting.TopicNotExist {
			t.Errorf("topic %q: code %d %q", topic, resp.Code, resp.Remark)
		}
	}
	if n := s.metric(`edgereg_gateway_route_reads_total{result="not_exist"}`); n != 4 {
		t.Errorf("%v not_exist reads, want 4", n)
	}
	// Names nobody holds take no room in the cache (and no watch): a peer
	// asking for made-up topics cannot crowd out real ones.
	for i := range 50 {
		if resp := c.call(goRouteRequest(fmt.Sprintf("made_up_%d", i))); resp.Code != remoting.TopicNotExist {
			t.Fatalf("made-up topic: %d %q", resp.Code, resp.Remark)
		}
	}
	if n := s.metric("edgereg_gateway_cached_topics"); n != 0 {
		t.Errorf("%v topics cached after reads of missing ones, want 0", n)
	}
}

// When no node answers, a cached route is still served, and a topic never
// cached gets no answer at all (the client times out and keeps its own
// route) rather than TOPIC_NOT_EXIST or SYSTEM_ERROR.
func TestNodesUnreachable(t *testing.T) {
	s := startSite(t, 2, nil)
	s.registerQUIC(orders(4))
	c := s.dial()
	decodeRoute(t, c.call(goRouteRequest("orders")))
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
	if rd := decodeRoute(t, c.call(goRouteRequest("orders"))); rd.QueueDatas[0].WriteQueueNums != 4 {
		t.Fatalf("cached route while cut: %+v", rd)
	}

	// The unknown topic's request stays unanswered; a later request on the
	// same connection is answered, and its answer is the next frame.
	c.send(goRouteRequest("never_seen"))
	nodetest.WaitFor(t, "the answer to be withheld", func() bool {
		return s.metric(`edgereg_gateway_withheld_total{code="105"}`) == 1
	})
	probe := request(9999, nil, nil)
	c.send(probe)
	if resp := c.next(); resp.Opaque != probe.Opaque || resp.Code != remoting.RequestCodeNotSupported {
		t.Fatalf("next frame: opaque %d code %d %q, want the answer to opaque %d", resp.Opaque, resp.Code, resp.Remark, probe.Opaque)
	}
	if n := s.metric(`edgereg_gateway_route_reads_total{result="not_exist"}`); n != 0 {
		t.Errorf("%v TOPIC_NOT_EXIST answers while the nodes were unreachable", n)
	}
}

// Unknown codes get REQUEST_CODE_NOT_SUPPORTED as 5.x answers; write and
// admin codes are refused, never relayed.
func TestUnsupportedAndRefusedCodes(t *testing.T) {
	s := startSite(t, 1, nil)
	c := s.dial()
	resp := c.call(request(4242, nil, nil))
	if resp.Code != remoting.RequestCodeNotSupported || resp.Remark != " request type 4242 not supported" {
		t.Errorf("unknown code: %d %q", resp.Code, resp.Remark)
	}
	for _, code := range []int16{remoting.PutKVConfig, remoting.DeleteKVConfig, remoting.WipeWritePermOfBroker,
		remoting.AddWritePermOfBroker, remoting.DeleteTopicInNameSrv, remoting.UpdateNameSrvConfig} {
		resp := c.call(request(code, map[string]string{"topic": "orders", "brokerName": "broker-a"}, nil))
		if resp.Code != remoting.NoPermission {
			t.Errorf("code %d: answered %d %q, want %d", code, resp.Code, resp.Remark, remoting.NoPermission)
		}
	}
	// Codes a NameServer does not know share one label value, so a peer
	// sending every int16 cannot make the metric grow a series each.
	for code := int16(5000); code < 5100; code++ {
		c.call(request(code, nil, nil))
	}
	if got := s.metric(`edgereg_gateway_requests_total{code="other",response="3"}`); got != 101 {
		t.Errorf("requests metric for unknown codes: %v, want 101", got)
	}
	if got := s.metric(`edgereg_gateway_requests_total{code="5000",response="3"}`); got != 0 {
		t.Errorf("an unknown code got a series of its own: %v", got)
	}
}

// A route whose watch the node refuses (here: one watched topic per
// connection) still converges: the gateway re-reads its cached routes from
// the route client every refresh interval.
func TestRouteConvergesWithoutWatch(t *testing.T) {
	s := startSiteNodes(t, 1, func(c *node.Config) { c.MaxWatchesPerConn = 1 },
		func(c *gateway.Config) { c.RefreshInterval = 100 * time.Millisecond })
	reg := orders(4)
	reg.Topics = append(reg.Topics, topicConfigs(4, "payments")...)
	s.registerQUIC(reg)
	c := s.dial()
	for _, topic := range []string{"orders", "payments"} {
		if rd := decodeRoute(t, c.call(goRouteRequest(topic))); rd.QueueDatas[0].WriteQueueNums != 4 {
			t.Fatalf("%s: %+v", topic, rd)
		}
	}
	reg = orders(8)
	reg.Topics = append(reg.Topics, topicConfigs(8, "payments")...)
	s.registerQUIC(reg)
	for _, topic := range []string{"orders", "payments"} {
		nodetest.WaitFor(t, topic+"'s change to reach the gateway", func() bool {
			return decodeRoute(t, c.call(goRouteRequest(topic))).QueueDatas[0].WriteQueueNums == 8
		})
	}
}

// A cached topic deleted on the nodes becomes TOPIC_NOT_EXIST (its watch
// says so), and its return is pushed back into the cache.
func TestRouteGoneAndBack(t *testing.T) {
	s := startSite(t, 2, nil)
	s.registerQUIC(orders(4))
	c := s.dial()
	decodeRoute(t, c.call(goRouteRequest("orders")))
	for _, tn := range s.nodes {
		if err := s.operator(tn).DeleteTopic(nodetest.Context(t), "orders"); err != nil {
			t.Fatal(err)
		}
	}
	nodetest.WaitFor(t, "the deletion to reach the gateway", func() bool {
		return c.call(goRouteRequest("orders")).Code == remoting.TopicNotExist
	})
	// A deleted topic stays deleted while the broker's full registrations
	// still name it (the node keeps a tombstone); the broker dropping it and
	// then creating it again brings it back.
	without := orders(6)
	without.DataVersion.Counter = 100
	without.Topics = topicConfigs(6, "TBW102")
	s.registerQUIC(without)
	reg := orders(6)
	reg.DataVersion.Counter = 101
	s.registerQUIC(reg)
	nodetest.WaitFor(t, "the topic's return to reach the gateway", func() bool {
		resp := c.call(goRouteRequest("orders"))
		return resp.Code == remoting.Success && decodeRoute(t, resp).QueueDatas[0].WriteQueueNums == 6
	})
}
