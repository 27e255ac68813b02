package node

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/remoting"
)

// These tests drive a node over remoting as a RocketMQ 5.x broker, client
// or mqadmin would, and hold its answers to a NameServer's
// (RouteInfoManager), and to what the same node says over QUIC.

// haListenAddr is the HA address a RocketMQ broker at addr announces: its
// host with the listen port plus one (haListenPort's default).
func haListenAddr(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	return net.JoinHostPort(host, strconv.Itoa(p+1))
}

// rmqBroker is one broker as it registers over remoting.
type rmqBroker struct {
	cluster, group, addr string
	id                   int64
	acting               bool
	zone                 string
	timeout              time.Duration // heartbeatTimeoutMillis, when set
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
		HAServerAddr: haListenAddr(b.addr), BrokerID: b.id, BodyCRC32: remoting.BodyCRC32(raw),
		EnableActingMaster: b.acting, ZoneName: b.zone, HeartbeatTimeout: b.timeout}
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

// groupView is one broker group of a route as both protocols describe it.
type groupView struct {
	Cluster, Zone string
	Addrs         string // fmt of the id -> address map
	Read, Write   int64
	Perm, SysFlag int64
}

func quicRouteView(r wire.Route) map[string]groupView {
	out := map[string]groupView{}
	for i, q := range r.Queues {
		b := r.Brokers[i]
		out[q.BrokerName] = groupView{Cluster: b.Cluster, Zone: b.Zone, Addrs: fmt.Sprint(b.Addrs),
			Read: int64(q.ReadQueues), Write: int64(q.WriteQueues), Perm: int64(q.Perm), SysFlag: int64(q.SysFlag)}
	}
	return out
}

func rmqRouteView(t testing.TB, r *remoting.TopicRouteData) map[string]groupView {
	t.Helper()
	if len(r.QueueDatas) != len(r.BrokerDatas) {
		t.Fatalf("%d queue datas, %d broker datas", len(r.QueueDatas), len(r.BrokerDatas))
	}
	brokers := map[string]remoting.BrokerData{}
	for _, b := range r.BrokerDatas {
		brokers[b.BrokerName] = b
	}
	out := map[string]groupView{}
	for _, q := range r.QueueDatas {
		b, ok := brokers[q.BrokerName]
		if !ok {
			t.Fatalf("queue data of %s without its broker data", q.BrokerName)
		}
		out[q.BrokerName] = groupView{Cluster: b.Cluster, Zone: b.ZoneName, Addrs: fmt.Sprint(b.BrokerAddrs),
			Read: int64(q.ReadQueueNums), Write: int64(q.WriteQueueNums), Perm: int64(q.Perm), SysFlag: int64(q.TopicSysFlag)}
	}
	return out
}

// TestRemotingAndQUICAgree: one registry, filled by remoting and QUIC
// brokers, answers the same over both protocols: every route (queue data,
// broker addresses, zones, acting masters), cluster info, member groups,
// every topic list, KV config, and not-found.
func TestRemotingAndQUICAgree(t *testing.T) {
	tn := startRemotingNode(t, func(c *Config) { c.RemotingAllowAdmin = true })
	c := dialRemoting(t, tn)
	// c1: broker-a (master + slave, zone z1) and broker-b (a slave whose
	// master left, acting master allowed) over remoting.
	a0 := rmqBroker{cluster: "c1", group: "broker-a", addr: "127.0.0.1:10911", zone: "z1"}
	a1 := rmqBroker{cluster: "c1", group: "broker-a", addr: "127.0.0.1:10921", id: 1, zone: "z1"}
	b0 := rmqBroker{cluster: "c1", group: "broker-b", addr: "127.0.0.1:20911", acting: true}
	b1 := rmqBroker{cluster: "c1", group: "broker-b", addr: "127.0.0.1:20921", id: 1, acting: true}
	tbw := rmqTopic("TBW102")
	tbw.Perm = 7
	unit, unitSub, both := rmqTopic("unit"), rmqTopic("unit-sub"), rmqTopic("unit-both")
	unit.TopicSysFlag, unitSub.TopicSysFlag, both.TopicSysFlag = 1, 2, 3
	sync := rmqTopic("rmq_sys_SYNC_BROKER_MEMBER_broker-b")
	sync.Perm, sync.ReadQueueNums, sync.WriteQueueNums = 1, 1, 1
	a0.register(t, c, 1, 1, append(rmqTopics("t", "%RETRY%g", "only-a"), tbw, unit, unitSub, both)...)
	a1.register(t, c, 2, 1)
	b0.register(t, c, 3, 1, append(rmqTopics("t", "only-b"), sync)...)
	b1.register(t, c, 4, 1, append(rmqTopics("t", "only-b"), sync)...)
	b0.unregister(t, c, 5)
	// c2: broker-c over QUIC.
	qb := tn.dial(pki.RoleBroker, "broker-c")
	rc := registration("c2", "broker-c", 0, "127.0.0.1:30911", "t", "only-c")
	rc.Zone = "z2"
	if _, err := qb.Register(ctxT(t), rc); err != nil {
		t.Fatal(err)
	}

	qc, op := tn.dial(pki.RoleClient), tn.dial(pki.RoleOperator)
	opaque := int32(100)
	next := func() int32 { opaque++; return opaque }
	compareRoutes := func(when string) {
		t.Helper()
		for _, topic := range tn.Registry().Topics() {
			qr, _, err := qc.Route(ctxT(t), topic, wire.ClientAttrs{})
			if err != nil {
				t.Fatalf("%s: QUIC route of %s: %v", when, topic, err)
			}
			_, rr := rmqRoute(t, c, next(), topic)
			if rr == nil {
				t.Fatalf("%s: remoting has no route of %s", when, topic)
			}
			if q, r := quicRouteView(qr), rmqRouteView(t, rr); fmt.Sprint(q) != fmt.Sprint(r) {
				t.Errorf("%s: route of %s\nQUIC     %v\nremoting %v", when, topic, q, r)
			}
		}
	}
	compareRoutes("after registration")

	// Spot checks of what both agreed on.
	if _, r := rmqRoute(t, c, next(), "only-b"); fmt.Sprint(r.BrokerDatas[0].BrokerAddrs) != "map[0:127.0.0.1:20921]" || r.QueueDatas[0].Perm != 4 {
		t.Errorf("acting master of broker-b: %+v %+v", r.BrokerDatas, r.QueueDatas)
	}
	if _, r := rmqRoute(t, c, next(), sync.TopicName); fmt.Sprint(r.BrokerDatas[0].BrokerAddrs) != "map[1:127.0.0.1:20921]" {
		t.Errorf("the member-group topic shows %v, want the real ids", r.BrokerDatas[0].BrokerAddrs)
	}

	// Not found: QUIC's code 5, remoting's TOPIC_NOT_EXIST (17).
	if _, _, err := qc.Route(ctxT(t), "nosuch", wire.ClientAttrs{}); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("QUIC route of an unknown topic: %v", err)
	}
	if resp, _ := rmqRoute(t, c, next(), "nosuch"); resp.Code != remoting.TopicNotExist {
		t.Errorf("remoting route of an unknown topic: %+v", resp)
	}

	// Cluster info: the same groups and clusters, never re-keyed.
	qci, err := qc.ClusterInfo(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	rci, err := remoting.DecodeClusterInfo(c.call(&remoting.Command{Code: remoting.GetBrokerClusterInfo, Opaque: next()}).Body)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(qci.Clusters) != fmt.Sprint(rci.ClusterAddrTable) || len(qci.Groups) != len(rci.BrokerAddrTable) {
		t.Errorf("clusters: QUIC %v, remoting %v", qci.Clusters, rci.ClusterAddrTable)
	}
	for name, g := range qci.Groups {
		rg := rci.BrokerAddrTable[name]
		if fmt.Sprint(g.Addrs) != fmt.Sprint(rg.BrokerAddrs) || g.Cluster != rg.Cluster || g.Zone != rg.ZoneName {
			t.Errorf("cluster info of %s: QUIC %+v, remoting %+v", name, g, rg)
		}
		// Member groups, as both ask for them.
		qm, err := qc.BrokerMemberGroup(ctxT(t), g.Cluster, name)
		if err != nil {
			t.Fatal(err)
		}
		resp := c.call(&remoting.Command{Code: remoting.GetBrokerMemberGroup, Opaque: next(),
			ExtFields: map[string]string{"clusterName": g.Cluster, "brokerName": name}})
		rm, err := remoting.DecodeBrokerMemberGroup(resp.Body)
		if err != nil || fmt.Sprint(rm.BrokerAddrs) != fmt.Sprint(qm.Addrs) || rm.Cluster != g.Cluster || rm.BrokerName != name {
			t.Errorf("member group of %s: QUIC %+v, remoting %+v %v", name, qm, rm, err)
		}
	}
	if a := rci.BrokerAddrTable["broker-b"].BrokerAddrs; fmt.Sprint(a) != "map[1:127.0.0.1:20921]" {
		t.Errorf("cluster info re-keyed broker-b: %v", a)
	}

	// Topic lists.
	lists := []struct {
		code  int16
		query wire.TopicsQuery
		ext   map[string]string
	}{
		{remoting.GetAllTopicListFromNameSrv, wire.TopicsQuery{Kind: wire.TopicsAll}, nil},
		{remoting.GetTopicsByCluster, wire.TopicsQuery{Kind: wire.TopicsByCluster, Cluster: "c1"}, map[string]string{"cluster": "c1"}},
		{remoting.GetTopicsByCluster, wire.TopicsQuery{Kind: wire.TopicsByCluster, Cluster: "c2"}, map[string]string{"cluster": "c2"}},
		{remoting.GetSystemTopicListFromNS, wire.TopicsQuery{Kind: wire.TopicsSystem}, nil},
		{remoting.GetUnitTopicList, wire.TopicsQuery{Kind: wire.TopicsUnit}, nil},
		{remoting.GetHasUnitSubTopicList, wire.TopicsQuery{Kind: wire.TopicsUnitSub}, nil},
		{remoting.GetHasUnitSubUnunitTopicList, wire.TopicsQuery{Kind: wire.TopicsUnitSubWithoutUnit}, nil},
	}
	for _, l := range lists {
		ql, err := qc.Topics(ctxT(t), l.query)
		if err != nil {
			t.Fatalf("QUIC topics %+v: %v", l.query, err)
		}
		resp := c.call(&remoting.Command{Code: l.code, Opaque: next(), ExtFields: l.ext})
		rl, err := remoting.DecodeTopicList(resp.Body)
		if err != nil {
			t.Fatalf("remoting topic list %d: %v", l.code, err)
		}
		if q, r := slices.Sorted(slices.Values(ql)), slices.Sorted(slices.Values(rl.TopicList)); !slices.Equal(q, r) {
			t.Errorf("topic list %d: QUIC %v, remoting %v", l.code, q, r)
		}
	}
	unitList, _ := qc.Topics(ctxT(t), wire.TopicsQuery{Kind: wire.TopicsUnitSubWithoutUnit})
	if fmt.Sprint(unitList) != "[unit-sub]" {
		t.Errorf("unit-sub without unit: %v", unitList)
	}
	if byC2, _ := qc.Topics(ctxT(t), wire.TopicsQuery{Kind: wire.TopicsByCluster, Cluster: "c2"}); fmt.Sprint(byC2) != "[only-c t]" {
		t.Errorf("topics of c2: %v", byC2)
	}
	// An unknown cluster has no topics (RocketMQ answers an empty list).
	resp := c.call(&remoting.Command{Code: remoting.GetTopicsByCluster, Opaque: next(), ExtFields: map[string]string{"cluster": "nosuch"}})
	if resp.Code != remoting.Success || string(resp.Body) != `{"topicList":[]}` {
		t.Errorf("topics of an unknown cluster: %+v %s", resp, resp.Body)
	}

	// KV config: one store, either protocol.
	if err := op.KVPut(ctxT(t), "ORDER_TOPIC_CONFIG", "t", "broker-a:4"); err != nil {
		t.Fatal(err)
	}
	kvResp := c.call(&remoting.Command{Code: remoting.GetKVConfig, Opaque: next(),
		ExtFields: map[string]string{"namespace": "ORDER_TOPIC_CONFIG", "key": "t"}})
	if kvResp.Code != remoting.Success || kvResp.Ext("value") != "broker-a:4" {
		t.Errorf("remoting get of a QUIC put: %+v", kvResp)
	}
	c.call(&remoting.Command{Code: remoting.PutKVConfig, Opaque: next(),
		ExtFields: map[string]string{"namespace": "ORDER_TOPIC_CONFIG", "key": "u", "value": "broker-c:8"}})
	if m, err := op.KVList(ctxT(t), "ORDER_TOPIC_CONFIG"); err != nil || fmt.Sprint(m) != "map[t:broker-a:4 u:broker-c:8]" {
		t.Errorf("QUIC list after a remoting put: %v %v", m, err)
	}
	// A broker's registration answer carries that namespace.
	if body := a0.register(t, c, next(), 1).Body; string(body) != `{"table":{"t":"broker-a:4","u":"broker-c:8"}}` {
		t.Errorf("ORDER_TOPIC_CONFIG in a registration answer: %s", body)
	}

	// Deleting t from c1 over remoting: both see only broker-c's queue data.
	if resp := c.call(&remoting.Command{Code: remoting.DeleteTopicInNameSrv, Opaque: next(),
		ExtFields: map[string]string{"topic": "t", "clusterName": "c1"}}); resp.Code != remoting.Success {
		t.Fatal(resp)
	}
	if _, r := rmqRoute(t, c, next(), "t"); r == nil || len(r.QueueDatas) != 1 || r.QueueDatas[0].BrokerName != "broker-c" {
		t.Errorf("t after its delete from c1: %+v", r)
	}
	// Wiping broker-a's write permission over remoting.
	c.call(&remoting.Command{Code: remoting.WipeWritePermOfBroker, Opaque: next(), ExtFields: map[string]string{"brokerName": "broker-a"}})
	compareRoutes("after the delete and the wipe")
	if err := op.DeleteTopic(ctxT(t), "only-a"); err != nil {
		t.Fatal(err)
	}
	if resp, _ := rmqRoute(t, c, next(), "only-a"); resp.Code != remoting.TopicNotExist {
		t.Errorf("a topic deleted over QUIC, read over remoting: %+v", resp)
	}
}

// TestRemotingSilentMasterExpires: brokers in acting-master mode register
// with heartbeatTimeoutMillis and renew by BROKER_HEARTBEAT; a master that
// goes silent expires after its own timeout, the slave that keeps
// heartbeating is shown as acting master, read-only, and a query of the
// expired master's data version says "changed" without a body (the node
// holds none), so the returning master registers in full and the route is
// restored.
func TestRemotingSilentMasterExpires(t *testing.T) {
	tn := startRemotingNode(t, func(c *Config) { c.ScanInterval = 20 * time.Millisecond })
	c := dialRemoting(t, tn)
	m := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10911", acting: true, timeout: time.Second}
	s := rmqBroker{cluster: "DefaultCluster", group: "broker-a", addr: "127.0.0.1:10921", id: 1, acting: true, timeout: time.Second}
	m.register(t, c, 1, 1, rmqTopics("a", "b")...)
	s.register(t, c, 2, 1, rmqTopics("a", "b")...)
	if l, ok := tn.Registry().Lease(m.cluster, m.addr); !ok || l.Threshold != time.Second {
		t.Fatalf("master's lease %+v: want the 1 s timeout it asked for", l)
	}
	beat := &remoting.Command{Code: remoting.BrokerHeartbeat, Flag: remoting.FlagOneway,
		ExtFields: map[string]string{"clusterName": s.cluster, "brokerAddr": s.addr, "brokerName": s.group}}
	expired := false
	for i := 0; i < 500 && !expired; i++ {
		beat.Opaque = int32(100 + i)
		c.send(beat)
		time.Sleep(20 * time.Millisecond)
		_, expired = tn.Registry().Lease(m.cluster, m.addr)
		expired = !expired
	}
	if !expired {
		t.Fatal("a master silent for 10 s with a 1 s timeout still holds its lease")
	}
	if _, ok := tn.Registry().Lease(s.cluster, s.addr); !ok {
		t.Fatal("the heartbeating slave expired too")
	}
	_, r := rmqRoute(t, c, 50, "a")
	if r == nil || fmt.Sprint(r.BrokerDatas[0].BrokerAddrs) != "map[0:127.0.0.1:10921]" || r.QueueDatas[0].Perm != 4 {
		t.Fatalf("route after the master expired: %+v", r)
	}
	q := c.call(remoting.NewRequest(remoting.QueryDataVersion, 51,
		remoting.BrokerHeader{BrokerName: m.group, BrokerAddr: m.addr, ClusterName: m.cluster}.Ext(),
		remoting.DataVersion{Counter: 1, Timestamp: 1735689600000}.AppendJSON(nil)))
	if q.Code != remoting.Success || q.Ext("changed") != "true" || len(q.Body) != 0 {
		t.Fatalf("data version query of the expired master: %+v %s", q, q.Body)
	}
	m.register(t, c, 52, 1, rmqTopics("a", "b")...) // the same data version as before it expired
	_, r = rmqRoute(t, c, 53, "a")
	if r == nil || fmt.Sprint(r.BrokerDatas[0].BrokerAddrs) != "map[0:127.0.0.1:10911 1:127.0.0.1:10921]" || r.QueueDatas[0].Perm != 6 {
		t.Fatalf("route after the master returned: %+v", r)
	}
}

// TestRemotingBrokerMovesCluster: a group belongs to one cluster. A
// NameServer would add the group's name to the second cluster too while its
// BrokerData still names the first (a group in two clusters); the node
// refuses with a clear error while any member of the group is registered in
// the old cluster, and takes the group once it is gone, which is what a
// broker restarted with a new brokerClusterName gets after its shutdown
// unregistered it.
func TestRemotingBrokerMovesCluster(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	old := rmqBroker{cluster: "c1", group: "broker-a", addr: "127.0.0.1:10911"}
	slave := rmqBroker{cluster: "c1", group: "broker-a", addr: "127.0.0.1:10921", id: 1}
	old.register(t, c, 1, 1, rmqTopics("a", "b")...)
	slave.register(t, c, 2, 1)
	old.unregister(t, c, 3)
	moved := old
	moved.cluster = "c2"
	body := (&remoting.RegisterBrokerBody{TopicConfigTable: map[string]remoting.TopicConfig{"a": rmqTopic("a"), "b": rmqTopic("b")}}).EncodeJSON()
	h := remoting.RegisterBrokerHeader{BrokerName: moved.group, BrokerAddr: moved.addr, ClusterName: moved.cluster, BodyCRC32: remoting.BodyCRC32(body)}
	resp := c.call(remoting.NewRequest(remoting.RegisterBroker, 4, h.Ext(), body))
	if resp.Code != remoting.SystemError || !strings.Contains(resp.Remark, `belongs to cluster "c1"`) {
		t.Fatalf("a group's master moving cluster while its slave is in the old one: %+v", resp)
	}
	slave.unregister(t, c, 5)
	moved.register(t, c, 6, 2, rmqTopics("a", "b")...)
	ci := tn.Registry().ClusterInfo()
	if fmt.Sprint(ci.Clusters) != "map[c2:[broker-a]]" || ci.Groups["broker-a"].Cluster != "c2" {
		t.Fatalf("after the move: %+v", ci)
	}
}
