package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

func TestRegisterRouteHeartbeatExpire(t *testing.T) {
	// The short lease below asks for 1 ms: allow it.
	tn := startNode(t, func(c *Config) { c.MinLeaseTimeout = time.Millisecond })
	ctx := ctxT(t)
	broker := tn.dial(pki.RoleBroker)
	reader := tn.dial(pki.RoleClient)

	reg := registration("c1", "b1", 0, "10.0.0.1:10911", "orders")
	reg.HeartbeatTimeoutMs = 60_000
	ack, err := broker.Register(ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Lease.Epoch == 0 || ack.Lease.DeadlineMs <= time.Now().UnixMilli() {
		t.Fatalf("ack = %+v", ack)
	}
	route, version, err := reader.Route(ctx, "orders", wire.ClientAttrs{})
	if err != nil {
		t.Fatal(err)
	}
	if len(route.Brokers) != 1 || route.Brokers[0].Addrs[0] != "10.0.0.1:10911" || version == 0 {
		t.Fatalf("route = %+v v%d", route, version)
	}
	// A poll naming the current version is answered "not modified".
	rs, err := reader.GetRoutes(ctx, &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "orders", Version: version}, {Topic: "nope"}}})
	if err != nil {
		t.Fatal(err)
	}
	if rs.Results[0].Status != wire.StatusNotModified || rs.Results[0].Route != nil || rs.Results[1].Status != wire.StatusNotFound {
		t.Fatalf("poll = %+v", rs.Results)
	}
	hb, err := broker.Heartbeat(ctx, &wire.Heartbeat{Cluster: "c1", Addr: reg.Addr, Epoch: ack.Lease.Epoch, DataVersion: reg.DataVersion})
	if err != nil || hb.VersionChanged || hb.Epoch != ack.Lease.Epoch {
		t.Fatalf("heartbeat = %+v, %v", hb, err)
	}
	hb, err = broker.Heartbeat(ctx, &wire.Heartbeat{Cluster: "c1", Addr: reg.Addr, Epoch: ack.Lease.Epoch, DataVersion: wire.DataVersion{Counter: 7}})
	if err != nil || !hb.VersionChanged {
		t.Fatalf("heartbeat with another version = %+v, %v", hb, err)
	}
	_, err = broker.Heartbeat(ctx, &wire.Heartbeat{Cluster: "c1", Addr: reg.Addr, Epoch: 1})
	if !errors.Is(err, wire.ErrStaleEpoch) {
		t.Fatalf("stale epoch: %v", err)
	}

	// A short lease expires and the route goes with it.
	reg2 := registration("c1", "b2", 0, "10.0.0.2:10911", "short")
	reg2.HeartbeatTimeoutMs = 1
	if _, err := broker.Register(ctx, reg2); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if expired := tn.ExpireNow(); len(expired) != 1 || expired[0].Addr != reg2.Addr {
		t.Fatalf("expired %+v", expired)
	}
	if _, _, err := reader.Route(ctx, "short", wire.ClientAttrs{}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("route after expiry: %v", err)
	}
	if _, err := broker.Heartbeat(ctx, &wire.Heartbeat{Cluster: "c1", Addr: reg2.Addr, Epoch: 1}); !errors.Is(err, wire.ErrLeaseNotFound) {
		t.Fatalf("heartbeat after expiry: %v", err)
	}
}

func TestEveryRequestKind(t *testing.T) {
	tn := startNode(t, nil)
	ctx := ctxT(t)
	op := tn.dial(pki.RoleOperator)
	reg := registration("c1", "b1", 0, "10.0.0.1:10911", "a", "b")
	reg.Topics[1].SysFlag = wire.SysFlagUnit
	ack, err := op.Register(ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	slave := registration("c1", "b1", 1, "10.0.0.2:10911")
	sack, err := op.Register(ctx, slave)
	if err != nil || sack.MasterAddr != reg.Addr {
		t.Fatalf("slave ack = %+v, %v", sack, err)
	}
	steps := []struct {
		name string
		run  func() error
	}{
		{"update topics", func() error {
			_, err := op.UpdateTopics(ctx, &wire.UpdateTopics{Cluster: "c1", Addr: reg.Addr, Epoch: ack.Lease.Epoch,
				DataVersion: wire.DataVersion{Counter: 2}, Upsert: []wire.TopicConfig{{Name: "c", ReadQueues: 1, WriteQueues: 1, Perm: 6}}})
			return err
		}},
		{"cluster info", func() error {
			ci, err := op.ClusterInfo(ctx)
			if err == nil && !slices.Equal(ci.Clusters["c1"], []string{"b1"}) {
				err = errors.New("wrong cluster info")
			}
			return err
		}},
		{"topics", func() error { return wantTopics(op.Topics(ctx, wire.TopicsQuery{}))("a", "b", "c") }},
		{"topics by cluster", func() error {
			return wantTopics(op.Topics(ctx, wire.TopicsQuery{Kind: wire.TopicsByCluster, Cluster: "c1"}))("a", "b", "c")
		}},
		{"system topics", func() error { return wantTopics(op.Topics(ctx, wire.TopicsQuery{Kind: wire.TopicsSystem}))("b1", "c1") }},
		{"unit topics", func() error { return wantTopics(op.Topics(ctx, wire.TopicsQuery{Kind: wire.TopicsUnit}))("b") }},
		{"unit sub topics", func() error { return wantTopics(op.Topics(ctx, wire.TopicsQuery{Kind: wire.TopicsUnitSub}))() }},
		{"unit sub without unit", func() error {
			return wantTopics(op.Topics(ctx, wire.TopicsQuery{Kind: wire.TopicsUnitSubWithoutUnit}))()
		}},
		{"member group", func() error {
			bd, err := op.BrokerMemberGroup(ctx, "c1", "b1")
			if err == nil && len(bd.Addrs) != 2 {
				err = errors.New("wrong member group")
			}
			return err
		}},
		{"wipe perm", func() error { return wantCount(op.WipeWritePerm(ctx, "b1"))(3) }},
		{"add perm", func() error { return wantCount(op.AddWritePerm(ctx, "b1"))(3) }},
		{"delete topic", func() error { return op.DeleteTopic(ctx, "c") }},
		{"kv put", func() error { return op.KVPut(ctx, "ns", "k", "v") }},
		{"kv get", func() error {
			v, err := op.KVGet(ctx, "ns", "k")
			if err == nil && v != "v" {
				err = errors.New("wrong value " + v)
			}
			return err
		}},
		{"kv list", func() error {
			m, err := op.KVList(ctx, "ns")
			if err == nil && m["k"] != "v" {
				err = errors.New("wrong list")
			}
			return err
		}},
		{"kv delete", func() error { return op.KVDelete(ctx, "ns", "k") }},
		{"leases", func() error {
			ls, err := op.Leases(ctx)
			if err == nil && len(ls) != 2 {
				err = errors.New("wrong leases")
			}
			return err
		}},
		{"ping", func() error {
			p, err := op.Ping(ctx)
			if err == nil && p.NodeID != tn.ID() {
				err = errors.New("wrong node id")
			}
			return err
		}},
		{"unregister", func() error {
			return op.Unregister(ctx, &wire.Unregister{Cluster: "c1", Addr: slave.Addr, Epoch: sack.Lease.Epoch})
		}},
	}
	for _, st := range steps {
		if err := st.run(); err != nil {
			t.Errorf("%s: %v", st.name, err)
		}
	}
	// Errors carry codes a program branches on and messages a person reads.
	_, err = op.KVGet(ctx, "ns", "k")
	if !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("deleted key: %v", err)
	}
	if err := op.DeleteTopic(ctx, "zzz"); !errors.Is(err, wire.ErrNotFound) || !strings.Contains(err.Error(), "zzz") {
		t.Errorf("delete unknown topic: %v", err)
	}
	if _, err := op.Register(ctx, registration("c1", "", 0, "x", "a")); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("invalid registration: %v", err)
	}
}

func wantTopics(got []string, err error) func(...string) error {
	return func(want ...string) error {
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			return fmt.Errorf("topics %v, want %v", got, want)
		}
		return nil
	}
}

func wantCount(got int, err error) func(int) error {
	return func(want int) error {
		if err == nil && got != want {
			return fmt.Errorf("count %d, want %d", got, want)
		}
		return err
	}
}

// rawStream opens a plain QUIC stream to the node, for sending broken
// frames that the client library would never send.
func rawStream(t *testing.T, tn *testNode, role pki.Role) *quic.Stream {
	t.Helper()
	qc, err := quic.DialAddr(ctxT(t), tn.Addr().String(), tn.tlsFor(role, "raw"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	s, err := qc.OpenStreamSync(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	s.SetDeadline(time.Now().Add(5 * time.Second))
	return s
}

func rawFrame(body []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	return append(out, body...)
}

func TestBadFrames(t *testing.T) {
	tn := startNode(t, func(c *Config) {
		c.ReadTimeout = 300 * time.Millisecond
		c.IdleTimeout = time.Second
		c.MaxRequestLen = 1024
	})
	ctx := ctxT(t)
	op := tn.dial(pki.RoleOperator)
	if _, err := op.Register(ctx, registration("c1", "b1", 0, "10.0.0.1:1", "t")); err != nil {
		t.Fatal(err)
	}
	readErr := func(s *quic.Stream) *wire.Error {
		t.Helper()
		f, err := wire.ReadFrame(s, 1<<20)
		if err != nil {
			t.Fatalf("no error frame: %v", err)
		}
		if f.Error == nil {
			t.Fatalf("frame %+v has no error", f)
		}
		return f.Error
	}

	t.Run("malformed CBOR keeps the stream", func(t *testing.T) {
		s := rawStream(t, tn, pki.RoleClient)
		s.Write(rawFrame([]byte{0xff, 0x00, 0x13}))
		if e := readErr(s); e.Code != wire.CodeBadRequest {
			t.Fatalf("error = %+v", e)
		}
		// The same stream still answers a good request.
		f, _ := wire.NewRequest(wire.TypePing, 9, nil)
		wire.WriteFrame(s, f)
		resp, err := wire.ReadFrame(s, 1<<20)
		if err != nil || resp.ID != 9 || resp.Error != nil {
			t.Fatalf("after a bad frame: %+v, %v", resp, err)
		}
	})
	t.Run("oversized frame", func(t *testing.T) {
		s := rawStream(t, tn, pki.RoleClient)
		s.Write(binary.BigEndian.AppendUint32(nil, 5000))
		e := readErr(s)
		if e.Code != wire.CodeFrameTooLarge || !strings.Contains(e.Message, "5000") || !strings.Contains(e.Message, "1024") {
			t.Fatalf("error = %+v", e)
		}
	})
	t.Run("unknown type", func(t *testing.T) {
		s := rawStream(t, tn, pki.RoleOperator)
		f := &wire.Frame{Type: 999, ID: 3}
		wire.WriteFrame(s, f)
		if e := readErr(s); e.Code != wire.CodeUnknownType {
			t.Fatalf("error = %+v", e)
		}
	})
	t.Run("no FIN is cut off by the deadline", func(t *testing.T) {
		s := rawStream(t, tn, pki.RoleClient)
		s.Write([]byte{0, 0, 0, 50, 0xa1}) // a frame that never completes
		// The node's read deadline (300 ms) must reset the stream before
		// the test's own (5 s) ends the read with a deadline error.
		_, err := io.ReadAll(s)
		var se *quic.StreamError
		if !errors.As(err, &se) || se.ErrorCode != codeStreamTimeout {
			t.Fatalf("stream not reset by the node's read deadline: %v", err)
		}
	})
	t.Run("idle stream is cut off", func(t *testing.T) {
		s := rawStream(t, tn, pki.RoleClient)
		f, _ := wire.NewRequest(wire.TypePing, 1, nil)
		wire.WriteFrame(s, f)
		if _, err := wire.ReadFrame(s, 1<<20); err != nil {
			t.Fatal(err)
		}
		_, err := io.ReadAll(s) // then say nothing
		var se *quic.StreamError
		if !errors.As(err, &se) {
			t.Fatalf("silent stream: %v", err)
		}
	})
	// Through all of that, other clients kept working.
	if _, _, err := op.Route(ctx, "t", wire.ClientAttrs{}); err != nil {
		t.Fatalf("route after bad frames: %v", err)
	}
}

func TestWarmingUp(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.WarmUp = time.Hour })
	c := tn.dial(pki.RoleClient)
	_, _, err := c.Route(ctxT(t), "t", wire.ClientAttrs{})
	if !errors.Is(err, wire.ErrWarmingUp) {
		t.Fatalf("route miss while warming up: %v", err)
	}
	p, err := c.Ping(ctxT(t))
	if err != nil || !p.WarmingUp {
		t.Fatalf("ping = %+v, %v", p, err)
	}
}

func TestRestartBrokerReconnects(t *testing.T) {
	dir := t.TempDir()
	tn := startNodeIn(t, dir, "127.0.0.1:0", nil)
	addr := tn.Addr().String()
	id := tn.ID()
	ctx := ctxT(t)
	broker := tn.dial(pki.RoleBroker)
	reg := registration("c1", "b1", 0, "10.0.0.1:1", "t")
	ack, err := broker.Register(ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	tn.stop()
	select {
	case <-broker.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the broker did not learn that the node went away")
	}
	tn2 := startNodeIn(t, dir, addr, nil)
	if tn2.ID() != id {
		t.Fatalf("node id changed across restart: %s -> %s", id, tn2.ID())
	}
	broker2 := tn2.dial(pki.RoleBroker)
	// The restarted node has no lease: the broker is told to register.
	_, err = broker2.Heartbeat(ctx, &wire.Heartbeat{Cluster: "c1", Addr: reg.Addr, Epoch: ack.Lease.Epoch, DataVersion: reg.DataVersion})
	if !errors.Is(err, wire.ErrLeaseNotFound) {
		t.Fatalf("heartbeat after restart: %v", err)
	}
	ack2, err := broker2.Register(ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	if ack2.Lease.Epoch <= ack.Lease.Epoch {
		t.Fatalf("epoch after restart %d not above %d", ack2.Lease.Epoch, ack.Lease.Epoch)
	}
	if _, _, err := tn2.dial(pki.RoleClient).Route(ctx, "t", wire.ClientAttrs{}); err != nil {
		t.Fatal(err)
	}
}

func TestWatchPushesChanges(t *testing.T) {
	tn := startNode(t, nil)
	ctx := ctxT(t)
	broker := tn.dial(pki.RoleBroker)
	watcher := tn.dial(pki.RoleClient)
	p, err := watcher.OpenPipe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var wack wire.WatchAck
	if err := p.Call(ctx, wire.TypeWatch, &wire.Watch{Topics: []wire.TopicVersion{{Topic: "t"}}}, &wack); err != nil || wack.Watching != 1 {
		t.Fatalf("watch = %+v, %v", wack, err)
	}
	reg := registration("c1", "b1", 0, "10.0.0.1:1", "t")
	ack, err := broker.Register(ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, p)
	if ev.Result.Topic != "t" || ev.Result.Status != wire.StatusOK || ev.Result.Version == 0 {
		t.Fatalf("event = %+v", ev)
	}
	if err := broker.Unregister(ctx, &wire.Unregister{Cluster: "c1", Addr: reg.Addr, Epoch: ack.Lease.Epoch}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, p); ev.Result.Status != wire.StatusNotFound {
		t.Fatalf("event after unregister = %+v", ev)
	}
}

func nextEvent(t *testing.T, p *client.Pipe) wire.RouteEvent {
	t.Helper()
	select {
	case f, ok := <-p.Events():
		if !ok {
			t.Fatalf("pipe ended: %v", p.Err())
		}
		var ev wire.RouteEvent
		if err := f.DecodeBody(&ev); err != nil {
			t.Fatal(err)
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no route event")
	}
	return wire.RouteEvent{}
}

func TestReconnectResumesSession(t *testing.T) {
	tn := startNode(t, nil)
	conf := tn.tlsFor(pki.RoleClient, "resume")
	first := tn.dialTLS(conf)
	if _, err := first.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	first.Close()
	second := tn.dialTLS(conf)
	if _, err := second.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if !second.Resumed() {
		t.Fatal("a reconnect with the same TLS config did not resume the session")
	}
}
