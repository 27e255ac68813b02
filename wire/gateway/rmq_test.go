package gateway_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/remoting"
)

// These tests hold the gateway's answers to what a 5.x NameServer (and a
// node's remoting listener) answers in the corners a NameServer user meets.

// A route request without a topic, or with an empty one, gets
// TOPIC_NOT_EXIST naming the topic as Java prints it: "null" when the
// field is missing.
func TestRmqRouteOfEmptyTopic(t *testing.T) {
	s := startSite(t, 1, nil)
	c := s.dial()
	for _, tc := range []struct {
		ext   map[string]string
		named string
	}{
		{map[string]string{"topic": ""}, ""},
		{map[string]string{}, "null"},
		{nil, "null"},
	} {
		resp := c.call(request(remoting.GetRouteInfoByTopic, tc.ext, nil))
		want := remoting.TopicNotExistResponse(resp, tc.named)
		if resp.Code != remoting.TopicNotExist || resp.Remark != want.Remark {
			t.Errorf("extFields %v: %d %q, want %d %q", tc.ext, resp.Code, resp.Remark, want.Code, want.Remark)
		}
	}
}

// QUERY_DATA_VERSION without a body is answered changed=true, as a
// NameServer (and a node) answers it: the missing DataVersion is null,
// which equals no version held. The gateway answered changed=false, and a
// broker with forceRegister=false then skipped its registration.
func TestRmqQueryDataVersionWithoutBody(t *testing.T) {
	s := startSite(t, 1, nil)
	c := s.dial()
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	if resp := c.call(reg); resp.Code != remoting.Success {
		t.Fatalf("registration: %d %q", resp.Code, resp.Remark)
	}
	q := fixtureCommand(t, "v5_query_data_version_request.hex")
	q.Body = nil
	resp := c.call(q)
	if resp.Code != remoting.Success || resp.Ext("changed") != "true" || len(resp.Body) == 0 {
		t.Fatalf("QUERY_DATA_VERSION without a body: %d changed=%q body %s, want 0, changed=true and the version held",
			resp.Code, resp.Ext("changed"), resp.Body)
	}
}

// A slave's answer names its master's HA address only when the master has
// one: a NameServer leaves the null field out rather than sending "".
func TestRmqSlaveAnswerWithoutMasterHAAddr(t *testing.T) {
	s := startSite(t, 1, nil)
	c := s.dial()
	master := fixtureCommand(t, "v5_register_broker_request.hex")
	delete(master.ExtFields, "haServerAddr")
	if resp := c.call(master); resp.Code != remoting.Success {
		t.Fatalf("master: %d %q", resp.Code, resp.Remark)
	}
	s.onEveryNode("the master's lease", func(tn *nodetest.Node) bool { _, ok := s.lease(tn, masterAddr); return ok })
	resp := c.call(slaveRequest(t, opaque.Add(1)))
	if resp.Code != remoting.Success || resp.Ext("masterAddr") != masterAddr {
		t.Fatalf("slave: %d %q %v", resp.Code, resp.Remark, resp.ExtFields)
	}
	if v, ok := resp.ExtFields["haServerAddr"]; ok {
		t.Fatalf("slave's answer has haServerAddr=%q, want no field (the master has no HA address)", v)
	}
}

// Queue counts past Integer.MAX_VALUE from a QUIC broker are capped in
// remoting, not wrapped negative.
func TestRmqLargeQueueCountsDoNotWrap(t *testing.T) {
	s := startSite(t, 1, nil)
	topics := topicConfigs(4, "big", "other")
	topics[0].ReadQueues, topics[0].WriteQueues = math.MaxUint32, 1<<31
	s.registerQUIC(&wire.Register{Cluster: "DefaultCluster", BrokerName: "broker-q", Addr: "127.0.0.1:50911",
		DataVersion: wire.DataVersion{Counter: 1}, Topics: topics})
	resp := s.dial().call(request(remoting.GetRouteInfoByTopic, map[string]string{"topic": "big"}, nil))
	r, err := remoting.DecodeTopicRouteData(resp.Body)
	if err != nil || len(r.QueueDatas) != 1 {
		t.Fatalf("route: %d %q %v", resp.Code, resp.Remark, err)
	}
	if q := r.QueueDatas[0]; q.ReadQueueNums != math.MaxInt32 || q.WriteQueueNums != math.MaxInt32 {
		t.Fatalf("queue data %+v, want counts capped at %d", q, math.MaxInt32)
	}
}

// A consumer group's retry and dead-letter topics may pass the 127
// characters of an ordinary topic (a group has up to 255): a broker behind
// the gateway registers them, and a consumer's lookup finds them.
func TestRmqLongGroupRetryTopicsRouted(t *testing.T) {
	s := startSite(t, 1, nil)
	c := s.dial()
	retry := "%RETRY%" + strings.Repeat("g", 255)
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	body, err := remoting.DecodeRegisterBrokerBody(reg.Body, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	body.TopicConfigTable[retry] = remoting.TopicConfig{TopicName: retry, ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}
	reg.Body = body.EncodeJSON()
	reg.ExtFields["bodyCrc32"] = strconv.Itoa(int(remoting.BodyCRC32(reg.Body)))
	if resp := c.call(reg); resp.Code != remoting.Success {
		t.Fatalf("registration: %d %q", resp.Code, resp.Remark)
	}
	nodetest.WaitFor(t, "the retry topic routed through the gateway", func() bool {
		return c.call(goRouteRequest(retry)).Code == remoting.Success
	})
}

// A topic registered through the gateway with every field a broker sends
// comes back in its route as a NameServer writes its QueueData.
func TestRmqTopicConfigFieldsRoundTrip(t *testing.T) {
	s := startSite(t, 1, nil)
	c := s.dial()
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	body, err := remoting.DecodeRegisterBrokerBody(reg.Body, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	body.TopicConfigTable["full"] = remoting.TopicConfig{TopicName: "full", ReadQueueNums: 8, WriteQueueNums: 16, Perm: 7,
		TopicFilterType: "MULTI_TAG", TopicSysFlag: 3, Order: true, Attributes: map[string]string{"+message.type": "FIFO"}}
	reg.Body = body.EncodeJSON()
	reg.ExtFields["bodyCrc32"] = strconv.Itoa(int(remoting.BodyCRC32(reg.Body)))
	if resp := c.call(reg); resp.Code != remoting.Success {
		t.Fatalf("registration: %d %q", resp.Code, resp.Remark)
	}
	want := `{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],` +
		`"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":7,"readQueueNums":8,"topicSysFlag":3,"writeQueueNums":16}]}`
	var got []byte
	nodetest.WaitFor(t, "the route of the topic through the gateway", func() bool {
		req := request(remoting.GetRouteInfoByTopic, map[string]string{"topic": "full"}, nil)
		resp := c.call(req)
		got = resp.Body
		return resp.Code == remoting.Success
	})
	if string(got) != want {
		t.Errorf("route body\n got %s\nwant %s", got, want)
	}
}
