package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/remoting"
)

// TestManyBrokersPastOldLimit: a gateway with default limits registers
// more than 64 brokers with nodes that keep their default admission. Each
// broker's registrar holds a QUIC connection per node with the gateway's
// broker certificate, and a node admits broker-class connections by their
// own per-host budget (1024), not the readers' 64, so the default
// MaxBrokers of 60 was a limit of an older node.
func TestManyBrokersPastOldLimit(t *testing.T) {
	const brokers = 70
	s := startSite(t, 1, nil)
	c := s.dial()
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	for i := range brokers {
		req := request(remoting.RegisterBroker, maps(reg.ExtFields), reg.Body)
		req.ExtFields["brokerName"] = fmt.Sprintf("broker-%03d", i)
		req.ExtFields["brokerAddr"] = "127.0.0.1:" + strconv.Itoa(20000+i)
		if resp := c.call(req); resp.Code != remoting.Success {
			t.Fatalf("broker %d of %d: %d %q", i+1, brokers, resp.Code, resp.Remark)
		}
	}
	tn := s.nodes[0]
	nodetest.WaitFor(t, "every broker's lease on the node", func() bool {
		n := 0
		for i := range brokers {
			if _, ok := s.lease(tn, "127.0.0.1:"+strconv.Itoa(20000+i)); ok {
				n++
			}
		}
		return n == brokers
	})
}

// countingHandler counts log records at WARN and above.
type countingHandler struct{ warns *atomic.Int64 }

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.warns.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// TestSkippedTopicsLogOnce: a registration naming many topics edgereg
// cannot hold is logged once, not once per topic: a broker (or anyone on
// the LAN) must not turn one frame into a million log lines.
func TestSkippedTopicsLogOnce(t *testing.T) {
	var warns atomic.Int64
	s := startSite(t, 1, func(c *gateway.Config) { c.Logger = slog.New(countingHandler{&warns}) })
	body := &remoting.RegisterBrokerBody{TopicConfigTable: map[string]remoting.TopicConfig{}}
	for i := range 1000 {
		name := fmt.Sprintf("bad.name.%d", i) // '.' is not a RocketMQ topic character
		body.TopicConfigTable[name] = remoting.TopicConfig{TopicName: name, ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}
	}
	for _, name := range []string{"good-a", "good-b"} {
		body.TopicConfigTable[name] = remoting.TopicConfig{TopicName: name, ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}
	}
	b := body.EncodeJSON()
	h := remoting.RegisterBrokerHeader{BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911", ClusterName: "DefaultCluster", BodyCRC32: remoting.BodyCRC32(b)}
	if resp := s.dial().call(request(remoting.RegisterBroker, h.Ext(), b)); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	if n := warns.Load(); n > 1 {
		t.Fatalf("%d warnings for one registration with 1000 unusable topic names", n)
	}
	if st := brokerState(t, s.gw, "127.0.0.1:10911"); st.Topics != 2 {
		t.Fatalf("%d topics kept, want the 2 valid ones", st.Topics)
	}
}

// TestRegisterTopicRelayed: a 5.x broker with enableSingleTopicRegister
// announces a created topic by REGISTER_TOPIC_IN_NAMESRV (217) instead of a
// partial REGISTER_BROKER. The gateway upserts it into the registrar of
// the broker group the queue data names, so the nodes see the topic at
// once, not at the broker's next full registration.
func TestRegisterTopicRelayed(t *testing.T) {
	s := startSite(t, 1, nil)
	c := s.dial()
	if resp := c.call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	rt := &remoting.TopicRouteData{QueueDatas: []remoting.QueueData{
		{BrokerName: "broker-a", ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6},
	}}
	if resp := c.call(request(remoting.RegisterTopicInNameSrv, map[string]string{"topic": "single"}, rt.Encode(remoting.Standard))); resp.Code != remoting.Success {
		t.Fatalf("REGISTER_TOPIC_IN_NAMESRV: %d %q", resp.Code, resp.Remark)
	}
	s.onEveryNode("the registered topic", func(tn *nodetest.Node) bool {
		route, ok := s.routeTopics(tn, "single")
		return ok && len(route.Queues) == 1 && route.Queues[0].WriteQueues == 2
	})
	// A group the gateway does not serve is ignored, as a NameServer
	// ignores a group it does not know.
	rt.QueueDatas[0].BrokerName = "broker-z"
	if resp := c.call(request(remoting.RegisterTopicInNameSrv, map[string]string{"topic": "elsewhere"}, rt.Encode(remoting.Standard))); resp.Code != remoting.Success {
		t.Fatalf("REGISTER_TOPIC_IN_NAMESRV for an unknown group: %d %q", resp.Code, resp.Remark)
	}
	if st := brokerState(t, s.gw, "127.0.0.1:10911"); st.Topics != 4 {
		t.Fatalf("broker-a holds %d topics, want the fixture's 3 and the registered one", st.Topics)
	}
}

// TestBrokerChatterStaysLocal: a broker's 1 Hz QUERY_DATA_VERSION and
// BROKER_HEARTBEAT (acting-master mode), oneway or not, and its 30 s
// re-registrations with nothing changed, renew nothing on the nodes
// beyond the registrar's own heartbeats (every 30 s here).
func TestBrokerChatterStaysLocal(t *testing.T) {
	s := startSite(t, 2, nil)
	c := s.dial()
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	if resp := c.call(reg); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	s.onEveryNode("the lease", func(tn *nodetest.Node) bool { _, ok := s.lease(tn, masterAddr); return ok })
	before := map[*nodetest.Node]wire.LeaseInfo{}
	for _, tn := range s.nodes {
		before[tn], _ = s.lease(tn, masterAddr)
	}
	for range 20 {
		c.send(fixtureCommand(t, "v5_query_data_version_oneway.hex"))
		c.send(fixtureCommand(t, "v5_broker_heartbeat_oneway.hex"))
		q := fixtureCommand(t, "v5_query_data_version_request.hex")
		q.Opaque = opaque.Add(1)
		if resp := c.call(q); resp.Code != remoting.Success {
			t.Fatalf("QUERY_DATA_VERSION: %d %q", resp.Code, resp.Remark)
		}
	}
	for range 3 {
		reg.Opaque = opaque.Add(1)
		if resp := c.call(reg); resp.Code != remoting.Success {
			t.Fatalf("re-register: %d %q", resp.Code, resp.Remark)
		}
	}
	for _, tn := range s.nodes {
		after, _ := s.lease(tn, masterAddr)
		if after.Heartbeats != before[tn].Heartbeats || after.Epoch != before[tn].Epoch {
			t.Errorf("node %s: heartbeats %d → %d, epoch %d → %d: broker chatter crossed the WAN",
				tn.Addr(), before[tn].Heartbeats, after.Heartbeats, before[tn].Epoch, after.Epoch)
		}
	}
}

// TestCompressedRegistrationPinsNoInflatedBytes: a compressed
// registration's topic names were substrings of their inflated lines, so a
// topic line carrying megabytes of attributes (a few KiB once compressed:
// zlib inflates up to 1,032 times) kept all of them alive in the gateway
// for as long as the broker stayed registered. A kept name must hold only
// its own bytes.
func TestCompressedRegistrationPinsNoInflatedBytes(t *testing.T) {
	s := startSite(t, 1, nil)
	c := s.dial()
	const topics, attr = 4, 3 << 20
	body := &remoting.RegisterBrokerBody{DataVersion: remoting.DataVersion{Counter: 1}, TopicConfigTable: map[string]remoting.TopicConfig{}}
	for i := range topics {
		name := fmt.Sprintf("pinned-%d", i)
		body.TopicConfigTable[name] = remoting.TopicConfig{TopicName: name, ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6,
			TopicFilterType: "SINGLE_TAG", Attributes: map[string]string{"+x": strings.Repeat("x", attr)}}
	}
	b := body.EncodeCompressed()
	body = nil
	h := remoting.RegisterBrokerHeader{BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911", ClusterName: "DefaultCluster",
		Compressed: true, BodyCRC32: remoting.BodyCRC32(b)}
	req := request(remoting.RegisterBroker, h.Ext(), b)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if resp := c.call(req); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	nodetest.WaitFor(t, "the broker's lease on the node", func() bool {
		_, ok := s.lease(s.nodes[0], "127.0.0.1:10911")
		return ok
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d topics with %d MiB of attributes each in %d bytes sent: heap in use grew by %d KiB",
		topics, attr>>20, len(b), grew>>10)
	if st := brokerState(t, s.gw, "127.0.0.1:10911"); st.Topics != topics {
		t.Fatalf("%d topics kept, want %d", st.Topics, topics)
	}
	// The registrar's connection to the node and its buffers: well under a
	// MiB, never the 12 MiB of inflated lines.
	if limit := int64(2 << 20); grew > limit {
		t.Errorf("a registration of %d bytes left the heap %d KiB larger, more than %d KiB", len(b), grew>>10, limit>>10)
	}
}

// recordingHandler keeps the text of log records at WARN and above.
type recordingHandler struct {
	mu    *sync.Mutex
	lines *[]string
}

func (h recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
		h.mu.Lock()
		*h.lines = append(*h.lines, b.String())
		h.mu.Unlock()
	}
	return nil
}
func (h recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordingHandler) WithGroup(string) slog.Handler      { return h }

// TestLongSkippedNameLogsShort: the warning about skipped topics named the
// first five in full, and a name can be as long as an inflated line: a
// compressed registration of 8 KiB with one 8 MiB name made an 8 MiB log
// line. A logged name is cut to a topic name's longest.
func TestLongSkippedNameLogsShort(t *testing.T) {
	var lines []string
	rec := recordingHandler{mu: &sync.Mutex{}, lines: &lines}
	s := startSite(t, 1, func(c *gateway.Config) { c.Logger = slog.New(rec) })
	body := &remoting.RegisterBrokerBody{DataVersion: remoting.DataVersion{Counter: 1}, TopicConfigTable: map[string]remoting.TopicConfig{}}
	for _, name := range []string{"good-a", "good-b", strings.Repeat("x", 8<<20)} {
		body.TopicConfigTable[name] = remoting.TopicConfig{TopicName: name, ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, TopicFilterType: "SINGLE_TAG"}
	}
	b := body.EncodeCompressed()
	h := remoting.RegisterBrokerHeader{BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911", ClusterName: "DefaultCluster",
		Compressed: true, BodyCRC32: remoting.BodyCRC32(b)}
	if resp := s.dial().call(request(remoting.RegisterBroker, h.Ext(), b)); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	if st := brokerState(t, s.gw, "127.0.0.1:10911"); st.Topics != 2 {
		t.Fatalf("%d topics kept, want the 2 valid ones", st.Topics)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if all := strings.Join(lines, ""); len(lines) != 1 || len(all) > 1024 {
		t.Fatalf("%d warnings for a registration of %d bytes, %d bytes long in all", len(lines), len(b), len(all))
	}
}

// TestFirstRegistrationWithAnUnusableTopic: whether a first registration
// can only be partial is told by the table the broker sent, as a NameServer
// (and a node's listener) tells it: two topics, one of which edgereg cannot
// hold, is a full table, and the broker registers with the other.
func TestFirstRegistrationWithAnUnusableTopic(t *testing.T) {
	s := startSite(t, 1, nil)
	body := &remoting.RegisterBrokerBody{TopicConfigTable: map[string]remoting.TopicConfig{
		"good":     {TopicName: "good", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6},
		"bad.name": {TopicName: "bad.name", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6},
	}}
	b := body.EncodeJSON()
	h := remoting.RegisterBrokerHeader{BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911", ClusterName: "DefaultCluster", BodyCRC32: remoting.BodyCRC32(b)}
	if resp := s.dial().call(request(remoting.RegisterBroker, h.Ext(), b)); resp.Code != remoting.Success {
		t.Fatalf("first registration of a two-topic table, one topic unusable: %d %q", resp.Code, resp.Remark)
	}
	if st := brokerState(t, s.gw, "127.0.0.1:10911"); st.Topics != 1 {
		t.Fatalf("%d topics kept, want the valid one", st.Topics)
	}
}

// TestRegistrationWithoutBody: a REGISTER_BROKER without a body (and
// bodyCrc32 0) registers the broker with no topics, as a NameServer reads
// it (an empty table at data version 0) and a node's listener does, instead
// of being refused as an empty body.
func TestRegistrationWithoutBody(t *testing.T) {
	s := startSite(t, 1, nil)
	h := remoting.RegisterBrokerHeader{BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911", ClusterName: "DefaultCluster"}
	if resp := s.dial().call(request(remoting.RegisterBroker, h.Ext(), nil)); resp.Code != remoting.Success {
		t.Fatalf("registration without a body: %d %q", resp.Code, resp.Remark)
	}
	if st := brokerState(t, s.gw, "127.0.0.1:10911"); st.Topics != 0 {
		t.Fatalf("%d topics, want none", st.Topics)
	}
}
