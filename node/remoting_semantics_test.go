package node

import (
	"testing"

	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/remoting"
)

// These tests drive a node over remoting as a RocketMQ 5.x broker, client
// or mqadmin would, and hold its answers to a NameServer's
// (RouteInfoManager), and to what the same node says over QUIC.

// rmqBroker is one broker as it registers over remoting.
type rmqBroker struct {
	cluster, group, addr string
	id                   int64
	acting               bool
	zone                 string
}

// register sends a REGISTER_BROKER with the given topics (perm 6, 4
// queues, unless the config says otherwise) and data version counter.
func (b rmqBroker) register(t testing.TB, c *rmqConn, opaque int32, counter int64, ts ...remoting.TopicConfig) *remoting.Command {
	t.Helper()
	body := &remoting.RegisterBrokerBody{DataVersion: remoting.DataVersion{Counter: counter, Timestamp: 1735689600000},
		TopicConfigTable: map[string]remoting.TopicConfig{}}
	for _, tc := range ts {
		body.TopicConfigTable[tc.TopicName] = tc
	}
	raw := body.EncodeJSON()
	h := remoting.RegisterBrokerHeader{BrokerName: b.group, BrokerAddr: b.addr, ClusterName: b.cluster,
		HAServerAddr: b.addr + "2", BrokerID: b.id, BodyCRC32: remoting.BodyCRC32(raw),
		EnableActingMaster: b.acting, ZoneName: b.zone}
	resp := c.call(remoting.NewRequest(remoting.RegisterBroker, opaque, h.Ext(), raw))
	if resp.Code != remoting.Success {
		t.Fatalf("register %s/%d: %+v", b.group, b.id, resp)
	}
	return resp
}

func (b rmqBroker) unregister(t testing.TB, c *rmqConn, opaque int32) {
	t.Helper()
	h := remoting.BrokerHeader{BrokerName: b.group, BrokerAddr: b.addr, ClusterName: b.cluster, BrokerID: b.id}
	if resp := c.call(remoting.NewRequest(remoting.UnregisterBroker, opaque, h.Ext(), nil)); resp.Code != remoting.Success {
		t.Fatalf("unregister %s/%d: %+v", b.group, b.id, resp)
	}
}

func rmqTopic(name string) remoting.TopicConfig {
	return remoting.TopicConfig{TopicName: name, ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}
}

func rmqTopics(names ...string) []remoting.TopicConfig {
	out := make([]remoting.TopicConfig, len(names))
	for i, n := range names {
		out[i] = rmqTopic(n)
	}
	return out
}

// rmqRoute asks for a topic's route as a Java client >= 4.9.4 does.
func rmqRoute(t testing.TB, c *rmqConn, opaque int32, topic string) (*remoting.Command, *remoting.TopicRouteData) {
	t.Helper()
	resp := c.call(&remoting.Command{Code: remoting.GetRouteInfoByTopic, Opaque: opaque, Version: remoting.V5_3_3,
		ExtFields: map[string]string{"topic": topic}})
	if resp.Code != remoting.Success {
		return resp, nil
	}
	r, err := remoting.DecodeTopicRouteData(resp.Body)
	if err != nil {
		t.Fatalf("route of %s: %v in %s", topic, err, resp.Body)
	}
	return resp, r
}

// TestRemotingWritePermCounts: mqadmin wipeWritePerm / addWritePerm print
// the count a NameServer returns, which is the number of topics the group
// has queue data in (operateWritePermOfBroker counts every one it visits),
// whether or not their permission changed.
func TestRemotingWritePermCounts(t *testing.T) {
	tn := startRemotingNode(t, func(c *Config) { c.RemotingAllowAdmin = true })
	c := dialRemoting(t, tn)
	b := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10911"}
	ro := rmqTopic("read-only")
	ro.Perm = 4
	b.register(t, c, 1, 1, append(rmqTopics("a", "b"), ro)...)
	other := rmqBroker{cluster: "DefaultCluster", group: "broker-b", addr: "127.0.0.1:10921"}
	other.register(t, c, 2, 1, rmqTopics("a", "z")...)

	perm := func(opaque int32, code int16, group, key string) string {
		t.Helper()
		resp := c.call(&remoting.Command{Code: code, Opaque: opaque, ExtFields: map[string]string{"brokerName": group}})
		if resp.Code != remoting.Success {
			t.Fatalf("code %d for %s: %+v", code, group, resp)
		}
		return resp.Ext(key)
	}
	steps := []struct {
		code  int16
		group string
		key   string
		want  string
	}{
		{remoting.WipeWritePermOfBroker, "broker-a", "wipeTopicCount", "3"}, // two changed, all three counted
		{remoting.WipeWritePermOfBroker, "broker-a", "wipeTopicCount", "3"}, // none changed
		{remoting.AddWritePermOfBroker, "broker-a", "addTopicCount", "3"},
		{remoting.AddWritePermOfBroker, "broker-a", "addTopicCount", "3"},
		{remoting.WipeWritePermOfBroker, "no-such-broker", "wipeTopicCount", "0"},
	}
	for i, s := range steps {
		if got := perm(int32(10+i), s.code, s.group, s.key); got != s.want {
			t.Errorf("step %d: code %d on %s answered %s=%s, want %s as a NameServer counts", i, s.code, s.group, s.key, got, s.want)
		}
	}
	// broker-b was never touched.
	if _, r := rmqRoute(t, c, 30, "z"); r == nil || r.QueueDatas[0].Perm != 6 {
		t.Fatalf("route of z: %+v", r)
	}
	// QUIC keeps its documented count: topics whose permission changed.
	op := tn.dial(pki.RoleOperator)
	if n, err := op.WipeWritePerm(ctxT(t), "broker-a"); err != nil || n != 3 {
		t.Fatalf("QUIC wipe: %d %v, want 3 changed", n, err)
	}
	if n, err := op.WipeWritePerm(ctxT(t), "broker-a"); err != nil || n != 0 {
		t.Fatalf("QUIC wipe again: %d %v, want 0 changed", n, err)
	}
}

// TestRemotingPrimeSlaveRegistrationIsUpsert: while a group has no master,
// its lowest-id slave's registrations carry the topics (RocketMQ's prime
// slave, 5.x brokers with or without enableActingMaster) and, as every
// REGISTER_BROKER, they are upserts: a 5.x slave with
// enableSplitRegistration sends its topics in chunks, and no chunk may take
// another's topics out of the routes.
func TestRemotingPrimeSlaveRegistrationIsUpsert(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	m := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10911"}
	s := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10921", id: 1}
	m.register(t, c, 1, 1, rmqTopics("a", "b", "c", "d")...)
	s.register(t, c, 2, 1, rmqTopics("a", "b", "c", "d")...)
	m.unregister(t, c, 3) // the master is down for maintenance
	// The slave restarts meanwhile: it unregisters (the group goes with
	// its topics), then registers again, alone and prime, its table in
	// two chunks of one data version.
	s.unregister(t, c, 4)
	s.register(t, c, 5, 2, rmqTopics("a", "b")...)
	s.register(t, c, 6, 2, rmqTopics("c", "d")...)
	for i, topic := range []string{"a", "b", "c", "d"} {
		resp, r := rmqRoute(t, c, int32(20+i), topic)
		if r == nil {
			t.Errorf("after the prime slave's second chunk, %s: code %d %q, want its route", topic, resp.Code, resp.Remark)
			continue
		}
		if q := r.QueueDatas[0]; q.BrokerName != "broker-a" || q.Perm != 4 {
			t.Errorf("route of %s: %+v, want broker-a read-only", topic, q)
		}
	}
}

// TestRemotingPrimeSlaveChunksWithMasterGone: the same with the group kept
// by a slave while its master is gone: the next prime slave's chunks add to
// what the group holds.
func TestRemotingPrimeSlaveChunksWithMasterGone(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	m := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10911"}
	s1 := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10921", id: 1}
	s2 := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10931", id: 2}
	m.register(t, c, 1, 1, rmqTopics("a", "b", "c", "d")...)
	s2.register(t, c, 2, 1, rmqTopics("a", "b", "c", "d")...)
	m.unregister(t, c, 3)
	// A slave with a lower id joins the masterless group: it is prime now
	// and its first registration applies, in chunks.
	s1.register(t, c, 4, 5, rmqTopics("a", "b")...)
	s1.register(t, c, 5, 5, rmqTopics("c", "d")...)
	for i, topic := range []string{"a", "b", "c", "d"} {
		if resp, r := rmqRoute(t, c, int32(20+i), topic); r == nil {
			t.Errorf("%s after the prime slave's chunks: code %d %q, want its route", topic, resp.Code, resp.Remark)
		}
	}
}
