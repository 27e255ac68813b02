package node

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/remoting"
)

// levelRecorder is a slog.Handler that keeps every record's level and
// message, so a test can check what a normal stop logs.
type levelRecorder struct {
	mu   *sync.Mutex
	recs *[]slog.Record
}

func newLevelRecorder() levelRecorder {
	return levelRecorder{mu: &sync.Mutex{}, recs: &[]slog.Record{}}
}

func (h levelRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h levelRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	*h.recs = append(*h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h levelRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h levelRecorder) WithGroup(string) slog.Handler      { return h }

func (h levelRecorder) errors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range *h.recs {
		if r.Level >= slog.LevelWarn {
			var b strings.Builder
			b.WriteString(r.Level.String() + " " + r.Message)
			r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
			out = append(out, b.String())
		}
	}
	return out
}

// TestRemotingShutdownLogsNoError: a normal stop of a node with a remoting
// listener logs nothing at WARN or above (it used to log "remoting listener
// stopped … use of closed network connection" at ERROR).
func TestRemotingShutdownLogsNoError(t *testing.T) {
	for i := range 5 { // the race is between closing the listener and Serve's Accept
		rec := newLevelRecorder()
		tn := startRemotingNode(t, func(c *Config) { c.Logger = slog.New(rec) })
		c := dialRemoting(t, tn)
		if resp := c.call(&remoting.Command{Code: remoting.GetAllTopicListFromNameSrv, Opaque: 1}); resp.Code != remoting.Success {
			t.Fatal(resp)
		}
		tn.stop()
		if errs := rec.errors(); len(errs) > 0 {
			t.Fatalf("run %d: a normal stop logged:\n%s", i, strings.Join(errs, "\n"))
		}
	}
	_ = time.Second
}

// TestRemotingWipeSurvivesUnchangedRegistration: WIPE_WRITE_PERM_OF_BROKER
// clears the write bit, and the broker's next periodic registration with an
// unchanged data version does not bring it back (REMOTING.md §3.6); a
// changed data version does, as with a NameServer. ADD_WRITE_PERM sets
// read-write (6), dropping other bits.
func TestRemotingWipeSurvivesUnchangedRegistration(t *testing.T) {
	tn := startRemotingNode(t, func(c *Config) { c.RemotingAllowAdmin = true })
	c := dialRemoting(t, tn)
	const addr = "127.0.0.1:10911"
	dv := remoting.DataVersion{Counter: 1, Timestamp: 1735689600000}
	if r := c.call(registerCmd(t, 1, 0, addr, dv, "a", "b")); r.Code != remoting.Success {
		t.Fatal(r)
	}
	perm := func(topic string) uint8 {
		t.Helper()
		rd, _, err := tn.Registry().RouteData(topic)
		if err != nil {
			t.Fatal(err)
		}
		return rd.Queues[0].Perm
	}
	if r := c.call(&remoting.Command{Code: remoting.WipeWritePermOfBroker, Opaque: 2, ExtFields: map[string]string{"brokerName": "broker-a"}}); r.Ext("wipeTopicCount") != "2" {
		t.Fatalf("wipe: %+v", r)
	}
	if r := c.call(registerCmd(t, 3, 0, addr, dv, "a", "b")); r.Code != remoting.Success {
		t.Fatal(r)
	}
	if p := perm("a"); p != 4 {
		t.Fatalf("perm %d after an unchanged re-registration, want 4: the wipe was undone", p)
	}
	dv.Counter++
	if r := c.call(registerCmd(t, 4, 0, addr, dv, "a", "b")); r.Code != remoting.Success {
		t.Fatal(r)
	}
	if p := perm("a"); p != 6 {
		t.Fatalf("perm %d after a changed registration, want 6", p)
	}
	c.call(&remoting.Command{Code: remoting.WipeWritePermOfBroker, Opaque: 5, ExtFields: map[string]string{"brokerName": "broker-a"}})
	if r := c.call(&remoting.Command{Code: remoting.AddWritePermOfBroker, Opaque: 6, ExtFields: map[string]string{"brokerName": "broker-a"}}); r.Ext("addTopicCount") != "2" || r.ExtFields == nil {
		t.Fatalf("add: %+v", r)
	}
	if p := perm("b"); p != 6 {
		t.Fatalf("perm %d after add, want 6", p)
	}
}

// TestRemotingSkippedTopicsLogShort: a registration naming many topics the
// registry cannot hold logs one short line (a count and a few names), not
// every name: one frame must not become megabytes of log.
func TestRemotingSkippedTopicsLogShort(t *testing.T) {
	rec := newLevelRecorder()
	tn := startRemotingNode(t, func(c *Config) { c.Logger = slog.New(rec) })
	c := dialRemoting(t, tn)
	names := []string{"good-a", "good-b"}
	for i := range 1000 {
		names = append(names, fmt.Sprintf("bad.name.%d", i))
	}
	if r := c.call(registerCmd(t, 1, 0, "127.0.0.1:10911", remoting.DataVersion{Counter: 1}, names...)); r.Code != remoting.Success {
		t.Fatal(r)
	}
	if got := routeTopics(t, tn); len(got) != 2 {
		t.Fatalf("topics %v, want the two valid ones", got)
	}
	lines := rec.errors()
	if len(lines) != 1 || len(lines[0]) > 1024 {
		t.Fatalf("%d warnings, the first %d bytes long", len(lines), len(strings.Join(lines, "")))
	}
}

// TestRemotingCRCOfMissingBody: a registration whose header names a body
// checksum but that carries no body is refused as a NameServer refuses it
// (UtilAll.crc32 of no body is 0, which does not match), not registered
// with no topics.
func TestRemotingCRCOfMissingBody(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	req := registerCmd(t, 1, 0, "127.0.0.1:10911", remoting.DataVersion{Counter: 1}, "a", "b")
	req.Body = nil
	if r := c.call(req); r.Code != remoting.SystemError || r.Remark != "crc32 not match" {
		t.Fatalf("no body, bodyCrc32=%s: %+v", req.Ext("bodyCrc32"), r)
	}
	if tn.Registry().LeaseCount() != 0 {
		t.Fatal("registered a broker from a frame whose body failed its checksum")
	}
}

// TestRemotingWriteTimeoutFollowsFlag: a remoting peer that pipelines
// requests and stops reading has its connection closed at the node's write
// timeout (--write-timeout, "a frame the node writes must be taken by the
// peer within this"), not at the read timeout; other peers are served
// meanwhile.
func TestRemotingWriteTimeoutFollowsFlag(t *testing.T) {
	tn := startRemotingNode(t, func(c *Config) {
		c.ReadTimeout = 10 * time.Minute
		c.WriteTimeout = 200 * time.Millisecond
	})
	reg := dialRemoting(t, tn)
	names := make([]string, 2000)
	for i := range names {
		names[i] = fmt.Sprintf("topic-with-a-long-name-%04d", i)
	}
	if r := reg.call(registerCmd(t, 1, 0, "127.0.0.1:10911", remoting.DataVersion{Counter: 1}, names...)); r.Code != remoting.Success {
		t.Fatal(r)
	}
	slow := dialRemoting(t, tn)
	if tcp, ok := slow.nc.(*net.TCPConn); ok {
		tcp.SetReadBuffer(4 << 10)
	}
	frame, err := remoting.NewRequest(remoting.GetAllTopicListFromNameSrv, 2, nil, nil).Encode()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for range 2000 { // ~110 MB of answers nobody reads
			if _, err := slow.nc.Write(frame); err != nil {
				return // closed by the node: expected
			}
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for tn.remoting.srv.Stats().WriteFailures == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the connection of a peer that reads nothing is still open after 20 s with --write-timeout %s: %+v",
				200*time.Millisecond, tn.remoting.srv.Stats())
		}
		if r := reg.call(&remoting.Command{Code: remoting.GetBrokerClusterInfo, Opaque: 3}); r.Code != remoting.Success {
			t.Fatalf("another peer: %+v", r)
		}
		time.Sleep(10 * time.Millisecond)
	}
	slow.nc.Close()
}

// TestRemotingTopicCreatedAgainAfterDelete: mqadmin deleteTopic removes a
// topic from the brokers, then from the NameServer (DELETE_TOPIC_IN_NAMESRV);
// an operator who creates it again (mqadmin updateTopic) makes the broker
// register it with a new data version: a partial registration of that one
// topic from 5.x, a full one from 4.9. A NameServer routes it again at once.
// The node kept the deletion's tombstone against every remoting
// registration with a changed data version, so the topic never came back
// while the broker had it, through any number of periodic registrations.
func TestRemotingTopicCreatedAgainAfterDelete(t *testing.T) {
	tn := startRemotingNode(t, func(c *Config) { c.RemotingAllowAdmin = true })
	c := dialRemoting(t, tn)
	const master = "127.0.0.1:10911"
	dv := func(n int64) remoting.DataVersion {
		return remoting.DataVersion{Counter: n, Timestamp: 1735689600000 + n}
	}
	if resp := c.call(registerCmd(t, 1, 0, master, dv(1), "a", "b", "again")); resp.Code != remoting.Success {
		t.Fatalf("registration: %+v", resp)
	}
	// mqadmin deleteTopic: the broker drops the topic (its data version
	// moves on), then the NameServer is told.
	if resp := c.call(&remoting.Command{Code: remoting.DeleteTopicInNameSrv, Opaque: 2,
		ExtFields: map[string]string{"topic": "again", "clusterName": "DefaultCluster"}}); resp.Code != remoting.Success {
		t.Fatalf("delete: %+v", resp)
	}
	// Created again on the broker: 5.x registers the one topic, 4.9 its
	// whole table, both with the next data version; then the periodic
	// registrations of that version follow.
	for i, reg := range []*remoting.Command{
		registerCmd(t, 3, 0, master, dv(3), "again"),
		registerCmd(t, 4, 0, master, dv(4), "a", "b", "again"),
		registerCmd(t, 5, 0, master, dv(4), "a", "b", "again"),
	} {
		if resp := c.call(reg); resp.Code != remoting.Success {
			t.Fatalf("registration %d after the re-creation: %+v", i, resp)
		}
		if resp, r := rmqRoute(t, c, int32(10+i), "again"); r == nil || len(r.QueueDatas) != 1 {
			t.Fatalf("route of the topic created again, after registration %d listing it: code %d %q", i, resp.Code, resp.Remark)
		}
	}
}

// TestRemotingCompressedRegistrationPinsNoInflatedBytes: a compressed
// registration's topic names were substrings of their inflated lines, so a
// topic line carrying megabytes of attributes (a few KiB once compressed:
// zlib inflates up to 1,032 times) kept all of them alive in the registry
// for as long as the topic lived: four topics in 11 KiB sent pinned 12 MiB.
// A registered name must hold only its own bytes.
func TestRemotingCompressedRegistrationPinsNoInflatedBytes(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	// Warm the connection and the registry up.
	if r := c.call(registerCmd(t, 1, 0, "127.0.0.1:10911", remoting.DataVersion{Counter: 1}, "warm-a", "warm-b")); r.Code != remoting.Success {
		t.Fatal(r)
	}
	const topics, attr = 4, 3 << 20
	body := &remoting.RegisterBrokerBody{DataVersion: remoting.DataVersion{Counter: 2}, TopicConfigTable: map[string]remoting.TopicConfig{}}
	for i := range topics {
		name := fmt.Sprintf("pinned-%d", i)
		body.TopicConfigTable[name] = remoting.TopicConfig{TopicName: name, ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6,
			TopicFilterType: "SINGLE_TAG", Attributes: map[string]string{"+x": strings.Repeat("x", attr)}}
	}
	b := body.EncodeCompressed()
	h := remoting.RegisterBrokerHeader{BrokerName: "broker-b", BrokerAddr: "127.0.0.1:10921", ClusterName: "DefaultCluster",
		HAServerAddr: "127.0.0.1:10922", Compressed: true, BodyCRC32: remoting.BodyCRC32(b)}
	cmd := remoting.NewRequest(remoting.RegisterBroker, 2, h.Ext(), b)
	frame, err := cmd.Encode()
	if err != nil {
		t.Fatal(err)
	}
	body = nil
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c.sendRaw(frame)
	if r := c.recv(); r.Code != remoting.Success {
		t.Fatalf("registration answered %d %q", r.Code, r.Remark)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d topics with %d MiB of attributes each in %d bytes sent: heap in use grew by %d KiB",
		topics, attr>>20, len(frame), grew>>10)
	if got := len(routeTopics(t, tn)); got != topics+2 {
		t.Fatalf("%d topics registered, want %d", got, topics+2)
	}
	if limit := int64(1 << 20); grew > limit {
		t.Errorf("a registration of %d bytes left the heap %d KiB larger, more than %d KiB", len(frame), grew>>10, limit>>10)
	}
}

// TestRemotingLongSkippedNameLogShort: the warning about skipped topics
// named the first five in full, and a name can be as long as an inflated
// line: a compressed registration of 8 KiB with one 8 MiB name made an
// 8 MiB log line. A logged name is cut to a topic name's longest.
func TestRemotingLongSkippedNameLogShort(t *testing.T) {
	rec := newLevelRecorder()
	tn := startRemotingNode(t, func(c *Config) { c.Logger = slog.New(rec) })
	c := dialRemoting(t, tn)
	body := &remoting.RegisterBrokerBody{DataVersion: remoting.DataVersion{Counter: 1}, TopicConfigTable: map[string]remoting.TopicConfig{}}
	for _, name := range []string{"good-a", "good-b", strings.Repeat("x", 8<<20)} {
		body.TopicConfigTable[name] = remoting.TopicConfig{TopicName: name, ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6, TopicFilterType: "SINGLE_TAG"}
	}
	b := body.EncodeCompressed()
	h := remoting.RegisterBrokerHeader{BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911", ClusterName: "DefaultCluster",
		HAServerAddr: "127.0.0.1:10912", Compressed: true, BodyCRC32: remoting.BodyCRC32(b)}
	if r := c.call(remoting.NewRequest(remoting.RegisterBroker, 1, h.Ext(), b)); r.Code != remoting.Success {
		t.Fatalf("registration of %d bytes answered %d %q", len(b), r.Code, r.Remark)
	}
	if got := routeTopics(t, tn); len(got) != 2 {
		t.Fatalf("topics %d, want the two valid ones", len(got))
	}
	lines := rec.errors()
	if len(lines) != 1 || len(lines[0]) > 1024 {
		t.Fatalf("%d warnings for a registration of %d bytes, %d bytes long in all", len(lines), len(b), len(strings.Join(lines, "")))
	}
}

// TestRemotingRegistrationsWaitWithoutTheirBodies: remoting registrations
// take turns (regMu), and each waited for its turn holding its whole
// decoded body, invalid topic names included. A compressed body of 8 KiB
// inflates to an 8 MiB name, so eight registrations waiting behind a slow
// one held 64 MiB, and every remoting worker of a host (a quarter of
// --workers) can wait so. A registration now waits with only the topics it
// will register.
func TestRemotingRegistrationsWaitWithoutTheirBodies(t *testing.T) {
	const k = 8
	tn := startRemotingNode(t, func(c *Config) { c.Workers = 8 * k }) // k workers per host
	var waiting atomic.Int32
	release := make(chan struct{})
	testHookRemotingRegisterWait = func() {
		waiting.Add(1)
		<-release
	}
	t.Cleanup(func() { testHookRemotingRegisterWait = nil })
	var frames [][]byte
	for i := range k {
		body := &remoting.RegisterBrokerBody{DataVersion: remoting.DataVersion{Counter: 1}, TopicConfigTable: map[string]remoting.TopicConfig{}}
		for _, name := range []string{"good-a", "good-b", strings.Repeat("x", 8<<20)} {
			body.TopicConfigTable[name] = remoting.TopicConfig{TopicName: name, ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6, TopicFilterType: "SINGLE_TAG"}
		}
		b := body.EncodeCompressed()
		h := remoting.RegisterBrokerHeader{BrokerName: fmt.Sprintf("broker-%d", i), BrokerAddr: fmt.Sprintf("127.0.0.1:%d", 11000+i),
			ClusterName: "DefaultCluster", Compressed: true, BodyCRC32: remoting.BodyCRC32(b)}
		frame, err := remoting.NewRequest(remoting.RegisterBroker, 1, h.Ext(), b).Encode()
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, frame)
	}
	conns := make([]*rmqConn, k)
	for i := range conns {
		conns[i] = dialRemoting(t, tn)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	sent := 0
	for i, c := range conns {
		c.sendRaw(frames[i])
		sent += len(frames[i])
	}
	deadline := time.Now().Add(30 * time.Second)
	for waiting.Load() < k && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := waiting.Load(); n < k {
		close(release)
		t.Fatalf("%d of %d registrations reached their turn", n, k)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	close(release)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d registrations of %d bytes in all waiting for their turn: heap in use grew by %d KiB", k, sent, grew>>10)
	for _, c := range conns {
		if r := c.recv(); r.Code != remoting.Success {
			t.Fatalf("registration answered %d %q", r.Code, r.Remark)
		}
	}
	if limit := int64(4 << 20); grew > limit {
		t.Errorf("%d registrations of %d bytes in all held %d KiB while waiting, more than %d KiB", k, sent, grew>>10, limit>>10)
	}
}

// TestRemotingRegistrationBodiesDecodedFewAtATime: a compressed body of
// 8 KiB inflates to 16 MiB, and every remoting worker (half of --workers,
// a quarter of them for one host) decoded one at once: 8 KiB sent per
// worker held tens of MiB each. Registrations take turns after decoding
// anyway (regMu), so the node decodes at most half the CPUs' worth (at
// least two) at a time, as a gateway does.
func TestRemotingRegistrationBodiesDecodedFewAtATime(t *testing.T) {
	limit := remotingDecoders()
	k := limit + 4
	// The hook is set before the node starts and cleared after it stops
	// (cleanups run last first), so its goroutines never race the test
	// for it, even when the test fails with registrations in progress.
	var decoded atomic.Int32
	release := make(chan struct{})
	var releaseOnce sync.Once
	testHookRemotingDecoded = func() {
		decoded.Add(1)
		<-release
	}
	t.Cleanup(func() { testHookRemotingDecoded = nil })
	tn := startRemotingNode(t, func(c *Config) { c.Workers = 8 * k }) // k workers per host
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })   // before the node's shutdown
	conns := make([]*rmqConn, k)
	sent := 0
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range conns {
		body := &remoting.RegisterBrokerBody{DataVersion: remoting.DataVersion{Counter: 1}, TopicConfigTable: map[string]remoting.TopicConfig{}}
		for _, name := range []string{"good-a", "good-b", strings.Repeat("x", 8<<20)} {
			body.TopicConfigTable[name] = remoting.TopicConfig{TopicName: name, ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6, TopicFilterType: "SINGLE_TAG"}
		}
		b := body.EncodeCompressed()
		h := remoting.RegisterBrokerHeader{BrokerName: fmt.Sprintf("broker-%d", i), BrokerAddr: fmt.Sprintf("127.0.0.1:%d", 11000+i),
			ClusterName: "DefaultCluster", Compressed: true, BodyCRC32: remoting.BodyCRC32(b)}
		frame, err := remoting.NewRequest(remoting.RegisterBroker, 1, h.Ext(), b).Encode()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = dialRemoting(t, tn)
		conns[i].sendRaw(frame)
		sent += len(frame)
	}
	// Wait for the decoders to be busy; more than limit never get there
	// while they are, so give the others a while to show they do not.
	deadline := time.Now().Add(30 * time.Second)
	for decoded.Load() < int32(limit) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for i := 0; i < 100 && decoded.Load() < int32(k); i++ {
		time.Sleep(5 * time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	at := decoded.Load()
	releaseOnce.Do(func() { close(release) })
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d registrations of %d bytes in all: %d decoded at once, heap in use grew by %d KiB", k, sent, at, grew>>10)
	for _, c := range conns {
		if r := c.recv(); r.Code != remoting.Success {
			t.Fatalf("registration answered %d %q", r.Code, r.Remark)
		}
	}
	if at != int32(limit) {
		t.Errorf("%d registration bodies decoded at once, want %d", at, limit)
	}
	// Each decoded body holds its 8 MiB name until its registration has
	// what it needs of it.
	if max := int64(limit+1) * 10 << 20; grew > max {
		t.Errorf("%d registrations of %d bytes in all held %d KiB while decoded, more than %d KiB", k, sent, grew>>10, max>>10)
	}
}

// TestRemotingRegistrationWithStaticTopic: a 5.x broker hosting a static
// topic registers its TopicQueueMappingInfo with fastjson's bare integer
// keys ("currIdMap":{0:0}); a NameServer reads that, and so must the node,
// or the broker never registers at all.
func TestRemotingRegistrationWithStaticTopic(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	body := &remoting.RegisterBrokerBody{DataVersion: remoting.DataVersion{Counter: 1}, TopicConfigTable: map[string]remoting.TopicConfig{
		"static": {TopicName: "static", ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6},
		"plain":  {TopicName: "plain", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6},
	}, TopicQueueMappingInfoMap: map[string]json.RawMessage{"static": json.RawMessage(
		`{"bname":"broker-a","currIdMap":{0:0,1:1},"dirty":false,"epoch":1735689600000,"scope":"__global__","topic":"static","totalQueues":2}`)}}
	b := body.EncodeJSON()
	h := remoting.RegisterBrokerHeader{BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911", ClusterName: "DefaultCluster",
		HAServerAddr: "127.0.0.1:10912", BodyCRC32: remoting.BodyCRC32(b)}
	if r := c.call(remoting.NewRequest(remoting.RegisterBroker, 1, h.Ext(), b)); r.Code != remoting.Success {
		t.Fatalf("registration of a broker with a static topic: code %d %q", r.Code, r.Remark)
	}
	if _, r := rmqRoute(t, c, 2, "static"); r == nil || len(r.QueueDatas) != 1 || r.QueueDatas[0].WriteQueueNums != 2 {
		t.Fatalf("route of the static topic: %+v", r)
	}
}
