package node

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/remoting"
)

// These tests hold the node's remoting answers to what a 5.x NameServer
// answers in the corners a NameServer user meets: empty fields, missing
// bodies, emptied namespaces, values the Java types cannot hold.

// A route request without a topic, or with an empty one, gets
// TOPIC_NOT_EXIST: a NameServer reads the missing field as null,
// pickupTopicRouteData finds nothing for it (its exception is caught and
// logged) and the answer names the topic as Java prints it ("null" for a
// missing one). Not SYSTEM_ERROR, not a closed connection while warming up.
func TestRmqRouteOfEmptyTopicIsTopicNotExist(t *testing.T) {
	for _, warm := range []bool{false, true} {
		tn := startRemotingNode(t, func(c *Config) {
			if warm {
				c.WarmUp = time.Hour
			}
		})
		c := dialRemoting(t, tn)
		for i, tc := range []struct {
			ext   map[string]string
			named string
		}{
			{map[string]string{"topic": ""}, ""},
			{map[string]string{}, "null"},
			{nil, "null"},
		} {
			resp := c.call(&remoting.Command{Code: remoting.GetRouteInfoByTopic, Opaque: int32(i + 1), Version: remoting.V5_3_3, ExtFields: tc.ext})
			want := remoting.TopicNotExistResponse(resp, tc.named)
			if resp.Code != remoting.TopicNotExist || resp.Remark != want.Remark || resp.Body != nil {
				t.Errorf("warming up %v, extFields %v: %d %q, want %d %q", warm, tc.ext, resp.Code, resp.Remark, want.Code, want.Remark)
			}
		}
	}
}

// QUERY_DATA_VERSION without a body: a NameServer decodes the missing
// DataVersion as null, which equals no version it holds, so it answers
// changed=true (the broker then registers in full), renews the lease and
// sends the version it holds.
func TestRmqQueryDataVersionWithoutBody(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	b := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10911"}
	b.register(t, c, 1, 0, rmqTopics("t1", "t2")...)
	h := remoting.BrokerHeader{BrokerName: b.group, BrokerAddr: b.addr, ClusterName: b.cluster}
	resp := c.call(remoting.NewRequest(remoting.QueryDataVersion, 2, h.Ext(), nil))
	if resp.Code != remoting.Success || resp.Ext("changed") != "true" {
		t.Fatalf("QUERY_DATA_VERSION without a body: %d changed=%q, want 0 changed=true", resp.Code, resp.Ext("changed"))
	}
	if want := `{"counter":0,"stateVersion":0,"timestamp":1735689600000}`; string(resp.Body) != want {
		t.Fatalf("body %s, want the held version %s", resp.Body, want)
	}
	// A broker registered without a body holds version 0: null still
	// differs from it.
	h.BrokerAddr = "127.0.0.1:10921"
	reg := remoting.RegisterBrokerHeader{BrokerName: h.BrokerName, BrokerAddr: h.BrokerAddr, ClusterName: h.ClusterName, BrokerID: 1}
	if r := c.call(remoting.NewRequest(remoting.RegisterBroker, 3, reg.Ext(), nil)); r.Code != remoting.Success {
		t.Fatalf("registration without a body: %+v", r)
	}
	resp = c.call(remoting.NewRequest(remoting.QueryDataVersion, 4, h.Ext(), nil))
	if resp.Code != remoting.Success || resp.Ext("changed") != "true" || string(resp.Body) != `{"counter":0,"stateVersion":0,"timestamp":0}` {
		t.Fatalf("QUERY_DATA_VERSION without a body of a broker at version 0: %d changed=%q %s, want 0 changed=true and version 0",
			resp.Code, resp.Ext("changed"), resp.Body)
	}
}

// A namespace whose last key is deleted stays, empty, as in a NameServer's
// KVConfigManager: GET_KVLIST_BY_NAMESPACE answers {"table":{}}, and a
// broker registering gets {"table":{}} for ORDER_TOPIC_CONFIG, from which
// it clears the order flag of its topics (with no body it keeps them
// ordered for ever).
func TestRmqEmptiedNamespaceStays(t *testing.T) {
	tn := startRemotingNode(t, func(c *Config) { c.RemotingAllowAdmin = true })
	c := dialRemoting(t, tn)
	ext := map[string]string{"namespace": "ORDER_TOPIC_CONFIG", "key": "t1", "value": "broker-a:4"}
	for i, code := range []int16{remoting.PutKVConfig, remoting.DeleteKVConfig} {
		if r := c.call(&remoting.Command{Code: code, Opaque: int32(i + 1), ExtFields: ext}); r.Code != remoting.Success {
			t.Fatalf("code %d: %+v", code, r)
		}
	}
	if r := c.call(&remoting.Command{Code: remoting.GetKVListByNamespace, Opaque: 3, ExtFields: ext}); r.Code != remoting.Success || string(r.Body) != `{"table":{}}` {
		t.Fatalf("KV list of the emptied namespace: %d %q %s, want 0 {\"table\":{}}", r.Code, r.Remark, r.Body)
	}
	b := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10911"}
	if r := b.register(t, c, 4, 1, rmqTopics("t1", "t2")...); string(r.Body) != `{"table":{}}` {
		t.Fatalf("registration answer body %q, want {\"table\":{}}", r.Body)
	}
}

// A slave's registration answer names its master; a master registered
// without an HA address has none, and a NameServer then leaves
// haServerAddr out of the header (null), not "".
func TestRmqSlaveAnswerWithoutMasterHAAddr(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	master := registerCmd(t, 1, 0, "127.0.0.1:10911", remoting.DataVersion{Counter: 1}, "t1", "t2")
	delete(master.ExtFields, "haServerAddr")
	if r := c.call(master); r.Code != remoting.Success {
		t.Fatal(r)
	}
	r := c.call(registerCmd(t, 2, 1, "127.0.0.1:10921", remoting.DataVersion{Counter: 1}, "t1", "t2"))
	if r.Ext("masterAddr") != "127.0.0.1:10911" {
		t.Fatalf("slave's answer: %+v", r.ExtFields)
	}
	if v, ok := r.ExtFields["haServerAddr"]; ok {
		t.Fatalf("slave's answer has haServerAddr=%q, want no field (the master has no HA address)", v)
	}
}

// Queue counts are Java ints in remoting. A QUIC broker
// may register counts up to 2^32-1; remoting shows them capped at
// Integer.MAX_VALUE, never wrapped negative (a client would build no
// queues, or fail, from a negative count).
func TestRmqLargeQueueCountsDoNotWrap(t *testing.T) {
	tn := startRemotingNode(t, nil)
	bc := tn.dial(pki.RoleBroker, "broker-q")
	reg := registration("DefaultCluster", "broker-q", 0, "127.0.0.1:50911", "big")
	reg.Topics[0].ReadQueues, reg.Topics[0].WriteQueues = math.MaxUint32, 1<<31
	if _, err := bc.Register(ctxT(t), reg); err != nil {
		t.Fatal(err)
	}
	c := dialRemoting(t, tn)
	_, r := rmqRoute(t, c, 1, "big")
	if r == nil {
		t.Fatal("no route")
	}
	q := r.QueueDatas[0]
	if q.ReadQueueNums != math.MaxInt32 || q.WriteQueueNums != math.MaxInt32 {
		t.Fatalf("queue data %+v, want counts capped at %d", q, math.MaxInt32)
	}
}

// A consumer group may have 255 characters (RocketMQ's Validators), so its
// retry and dead-letter topics, which brokers create and register with
// every NameServer, pass the 127 characters of an ordinary topic. They are
// routed, not skipped: a push consumer looks up its %RETRY% topic.
func TestRmqLongGroupRetryTopicsRouted(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	group := strings.Repeat("g", 255)
	retry, dlq := "%RETRY%"+group, "%DLQ%"+group
	b := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10911"}
	b.register(t, c, 1, 1, rmqTopics("t1", retry, dlq)...)
	for i, topic := range []string{retry, dlq} {
		if resp, r := rmqRoute(t, c, int32(2+i), topic); r == nil {
			t.Errorf("route of %s (%d bytes): %d %q", topic[:12], len(topic), resp.Code, resp.Remark)
		}
	}
}

// rmqReadRequests are requests of every read code a NameServer handles,
// with the extFields mqadmin or a broker sends.
func rmqReadRequests() []*remoting.Command {
	ext := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	return []*remoting.Command{
		{Code: remoting.GetKVConfig, ExtFields: ext("namespace", "ORDER_TOPIC_CONFIG", "key", "t1")},
		{Code: remoting.GetKVConfig, ExtFields: ext("namespace", "ORDER_TOPIC_CONFIG", "key", "none")},
		{Code: remoting.GetKVListByNamespace, ExtFields: ext("namespace", "ORDER_TOPIC_CONFIG")},
		{Code: remoting.GetKVListByNamespace, ExtFields: ext("namespace", "none")},
		{Code: remoting.GetRouteInfoByTopic, ExtFields: ext("topic", "t1")},
		{Code: remoting.GetRouteInfoByTopic, ExtFields: ext("topic", "none")},
		{Code: remoting.GetBrokerClusterInfo},
		{Code: remoting.GetAllTopicListFromNameSrv},
		{Code: remoting.GetTopicsByCluster, ExtFields: ext("cluster", "DefaultCluster")},
		{Code: remoting.GetSystemTopicListFromNS},
		{Code: remoting.GetUnitTopicList},
		{Code: remoting.GetHasUnitSubTopicList},
		{Code: remoting.GetHasUnitSubUnunitTopicList},
		{Code: remoting.GetNameSrvConfig},
		{Code: remoting.GetBrokerMemberGroup, ExtFields: ext("clusterName", "DefaultCluster", "brokerName", "broker-a")},
		{Code: 9999},
	}
}

// Every read code answers the same whether the request's header is JSON or
// RocketMQ's binary one (brokers and clients started with
// rocketmq.serialize.type=ROCKETMQ), byte for byte: 5.x answers in JSON
// whatever the request used. And none of them answers a oneway request:
// sent oneway first, the next frame on the connection is the answer to
// the first two-way request.
func TestRmqReadCodesAnswerAlikeInBothHeaders(t *testing.T) {
	tn := startRemotingNode(t, func(c *Config) { c.RemotingAllowAdmin = true })
	c := dialRemoting(t, tn)
	b := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10911"}
	b.register(t, c, 1, 1, rmqTopics("t1", "t2")...)
	put := map[string]string{"namespace": "ORDER_TOPIC_CONFIG", "key": "t1", "value": "broker-a:4"}
	if r := c.call(&remoting.Command{Code: remoting.PutKVConfig, Opaque: 2, ExtFields: put}); r.Code != remoting.Success {
		t.Fatal(r)
	}
	op := int32(10)
	for _, req := range rmqReadRequests() {
		req.Version, req.Flag = remoting.V5_3_3, remoting.FlagOneway
		op++
		req.Opaque = op
		c.send(req)
	}
	for _, req := range rmqReadRequests() {
		req.Version = remoting.V5_3_3
		op++
		req.Opaque = op
		json := c.call(req)
		op++
		req.Opaque, req.SerializeType = op, remoting.SerializeRocketMQ
		bin := c.call(req)
		bin.Opaque = json.Opaque
		jb, _ := json.Encode()
		bb, _ := bin.Encode()
		if string(jb) != string(bb) || bin.SerializeType != remoting.SerializeJSON {
			t.Errorf("code %d: JSON request answered\n%q\nROCKETMQ request answered (type %d)\n%q", req.Code, jb, bin.SerializeType, bb)
		}
	}
}

// Frames split across TCP reads at every byte, and frames pipelined in one
// write, are all answered, each by its opaque.
func TestRmqSplitAndPipelinedFrames(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	b := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10911"}
	b.register(t, c, 1, 1, rmqTopics("t1", "t2")...)
	var all []byte
	want := map[int32]bool{}
	for i, req := range rmqReadRequests() {
		req.Opaque = int32(100 + i)
		if i%2 == 1 {
			req.SerializeType = remoting.SerializeRocketMQ
		}
		f, err := req.Encode()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, f...)
		want[req.Opaque] = true
	}
	half := len(all) / 2
	for i := 0; i < half; i++ { // the first half a byte at a time
		c.sendRaw(all[i : i+1])
	}
	c.sendRaw(all[half:]) // the rest in one write
	for range len(want) {
		r := c.recv()
		if !want[r.Opaque] || !r.IsResponse() {
			t.Fatalf("unexpected frame %+v", r)
		}
		delete(want, r.Opaque)
	}
}

// A topic registered with every field a broker sends (perm with INHERIT,
// both unit flags, order, attributes) comes back in its route exactly as a
// NameServer writes its QueueData, and lands in the unit topic lists its
// flags name.
func TestRmqTopicConfigFieldsRoundTrip(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	b := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10911"}
	full := remoting.TopicConfig{TopicName: "full", ReadQueueNums: 8, WriteQueueNums: 16, Perm: 7, TopicFilterType: "MULTI_TAG",
		TopicSysFlag: 3, Order: true, Attributes: map[string]string{"+message.type": "FIFO"}}
	sub := remoting.TopicConfig{TopicName: "sub", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 4, TopicSysFlag: 2}
	b.register(t, c, 1, 1, full, sub)
	resp := c.call(&remoting.Command{Code: remoting.GetRouteInfoByTopic, Opaque: 2, Version: remoting.V5_3_3, ExtFields: map[string]string{"topic": "full"}})
	want := `{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],` +
		`"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":7,"readQueueNums":8,"topicSysFlag":3,"writeQueueNums":16}]}`
	if string(resp.Body) != want {
		t.Errorf("route body\n got %s\nwant %s", resp.Body, want)
	}
	for i, tc := range []struct {
		code int16
		want string
	}{
		{remoting.GetUnitTopicList, `{"topicList":["full"]}`},
		{remoting.GetHasUnitSubTopicList, `{"topicList":["full","sub"]}`},
		{remoting.GetHasUnitSubUnunitTopicList, `{"topicList":["sub"]}`},
	} {
		if r := c.call(&remoting.Command{Code: tc.code, Opaque: int32(3 + i)}); string(r.Body) != tc.want {
			t.Errorf("code %d: %s, want %s", tc.code, r.Body, tc.want)
		}
	}
}

// KV answers name a missing field as Java prints a null one.
func TestRmqKVRemarksNameMissingFields(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	for i, tc := range []struct {
		code   int16
		ext    map[string]string
		remark string
	}{
		{remoting.GetKVConfig, map[string]string{"namespace": "ns"}, "No config item, Namespace: ns Key: null"},
		{remoting.GetKVConfig, nil, "No config item, Namespace: null Key: null"},
		{remoting.GetKVListByNamespace, nil, "No config item, Namespace: null"},
	} {
		r := c.call(&remoting.Command{Code: tc.code, Opaque: int32(i + 1), ExtFields: tc.ext})
		if r.Code != remoting.QueryNotFound || r.Remark != tc.remark {
			t.Errorf("code %d %v: %d %q, want 22 %q", tc.code, tc.ext, r.Code, r.Remark, tc.remark)
		}
	}
}

// TestRemotingPopRetryTopicV2IsRouted: a RocketMQ 5 broker with
// enableRetryTopicV2 registers its pop consumers' retry topics as
// %RETRY%<group>+<topic>, and a NameServer routes them. The node skipped
// them from the registration ("topics skipped") and refused a route query
// for one as an invalid topic name.
func TestRemotingPopRetryTopicV2IsRouted(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	const retry = "%RETRY%pop-group+TopicTest"
	if resp := c.call(registerCmd(t, 1, 0, "127.0.0.1:51911", remoting.DataVersion{Counter: 1}, "TopicTest", retry)); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	resp := c.call(&remoting.Command{Code: remoting.GetRouteInfoByTopic, Opaque: 2, Version: remoting.V5_3_3, ExtFields: map[string]string{"topic": retry}})
	r, err := remoting.DecodeTopicRouteData(resp.Body)
	if resp.Code != remoting.Success || err != nil || len(r.BrokerDatas) != 1 || r.BrokerDatas[0].BrokerAddrs[0] != "127.0.0.1:51911" {
		t.Fatalf("route of %s: code %d %q, %+v %v", retry, resp.Code, resp.Remark, r, err)
	}
	if _, _, err := tn.dial(pki.RoleClient).Route(ctxT(t), retry, wire.ClientAttrs{}); err != nil {
		t.Errorf("QUIC route of %s: %v", retry, err)
	}
}
