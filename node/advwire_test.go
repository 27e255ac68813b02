package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// transportFrom returns a QUIC transport whose packets leave from ip (any
// 127/8 address is on the loopback interface), closed when the test ends.
func transportFrom(t *testing.T, ip string) *quic.Transport {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	t.Cleanup(func() { tr.Close(); udp.Close() })
	return tr
}

// dialFrom dials the node over tr, giving up after timeout.
func dialFrom(tn *testNode, tr *quic.Transport, conf *tls.Config, timeout time.Duration) (*quic.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	addr, err := net.ResolveUDPAddr("udp", tn.Addr().String())
	if err != nil {
		return nil, err
	}
	return tr.Dial(ctx, addr, conf, &quic.Config{})
}

// TestIdleBrokerConnsCannotHoldEveryHandshakeSlot: a broker keeps its
// handshake slot after its handshake until it registers, so that a
// reconnect storm registers the brokers it let in first. Those kept slots
// were bounded per source IP by nothing (the per-host bound counts
// handshakes in progress only): one broker certificate on one IP that
// connected and never registered held every slot of the node, and a
// client on another IP could not finish a handshake. A host's kept slots
// now count against its handshakes in progress.
func TestIdleBrokerConnsCannotHoldEveryHandshakeSlot(t *testing.T) {
	const slots, perHost = 8, 3
	tn := startNode(t, func(c *Config) {
		c.MaxHandshakes = slots
		c.MaxHandshakesPerHost = perHost
		c.HandshakeQueueTimeout = 2 * time.Second
	})
	attacker := transportFrom(t, "127.0.0.2")
	conf := tn.tlsFor(pki.RoleBroker, "idle-broker")
	held := 0
	for range slots {
		qc, err := dialFrom(tn, attacker, conf, 5*time.Second)
		if err != nil {
			t.Fatalf("idle broker connection %d: %v", held, err)
		}
		defer qc.CloseWithError(0, "")
		held++
	}
	// Once no handshake is in progress, the slots taken are those kept.
	waitFor(t, "handshakes to end", func() bool {
		tn.adm.mu.Lock()
		defer tn.adm.mu.Unlock()
		return tn.adm.handshakes == 0
	})
	taken := len(tn.adm.gate.slots)
	t.Logf("idle broker connections from 127.0.0.2: %d; handshake slots taken: %d of %d", held, taken, slots)
	if taken > perHost {
		t.Errorf("one source IP holds %d handshake slots, more than its %d handshakes per host", taken, perHost)
	}
	// A client on another address still gets in and is served.
	c, err := client.Dial(ctxT(t), tn.Addr().String(), client.Config{TLS: tn.tlsFor(pki.RoleClient, "other-ip")})
	if err != nil {
		t.Fatalf("a client on 127.0.0.1 could not connect while 127.0.0.2 held idle broker connections: %v", err)
	}
	defer c.Close()
	if _, err := c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestReadersHoldingTheByteBudgetDoNotDelayBrokers: issue 10 gave broker
// traffic capacity of its own (workers, connection budgets) so that client
// floods never delay a registration or a heartbeat, but the node-wide
// budget of bytes in flight was still shared: one client certificate
// holding it with a frame it sends slowly made every broker frame wait for
// budget until the hog's read timeout. Brokers and operators now have a
// budget of their own.
func TestReadersHoldingTheByteBudgetDoNotDelayBrokers(t *testing.T) {
	const limit = 64 << 10
	tn := startNode(t, func(c *Config) {
		c.MaxRequestLen, c.MaxBrokerFrameLen, c.MaxBytesInFlight = limit, limit, limit
		c.ReadTimeout = 30 * time.Second // the hog holds the budget for the whole test
	})
	ctx := ctxT(t)
	hog, err := dialFrom(tn, transportFrom(t, "127.0.0.2"), tn.tlsFor(pki.RoleClient, "hog"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer hog.CloseWithError(0, "")
	sendPartOfAFrame(t, ctx, hog, limit) // all of the readers' budget
	waitFor(t, "the hog to hold the budget", func() bool { return tn.inFlight.used.Load() >= limit })

	// A broker's registration (several KiB: its buffer must grow) and
	// heartbeat are answered while the hog still holds every byte.
	b := tn.dial(pki.RoleBroker)
	topics := make([]string, 200)
	for i := range topics {
		topics[i] = fmt.Sprintf("topic-with-a-longish-name-%03d", i)
	}
	ack, err := b.Register(ctx, registration("c1", "b1", 0, "10.0.0.1:1", topics...))
	if err != nil {
		t.Fatalf("registration while a client holds the byte budget: %v", err)
	}
	if _, err := b.Heartbeat(ctx, &wire.Heartbeat{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: ack.Lease.Epoch, DataVersion: wire.DataVersion{Counter: 1}}); err != nil {
		t.Fatalf("heartbeat while a client holds the byte budget: %v", err)
	}
	if used := tn.inFlight.used.Load(); used < limit {
		t.Fatalf("the broker was answered only once the hog let go (%d bytes held)", used)
	}
}

// TestOverlongTopicListsRefusedBeforeDecoding: a get-routes or watch names
// at most 10,000 topics, yet a 1 MiB client frame holding a million empty
// TopicVersion maps (one byte each) was decoded in full first: 24 MiB
// allocated per frame, 24 times the bytes received, for every worker at
// once. The count is now checked on the array's header.
func TestOverlongTopicListsRefusedBeforeDecoding(t *testing.T) {
	tn := startNode(t, nil)
	cs := &connState{ctx: context.Background(), peer: peer{Identity: pki.Identity{Role: pki.RoleClient}}}
	n := 1<<20 - 64 // fits a client's 1 MiB frame
	body := []byte{0xa1, 0x01, 0x9a, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	body = append(body, bytes.Repeat([]byte{0xa0}, n)...)
	for _, c := range []struct {
		t    wire.Type
		want string
	}{
		{wire.TypeGetRoutes, "more than 10000"},
		{wire.TypeWatch, "give 1 to 10000"},
	} {
		f := &wire.Frame{Type: c.t, ID: 1, Body: body}
		var watch *watcher
		var a answer
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		a = tn.handle(cs, f, &streamWriter{}, &watch)
		runtime.ReadMemStats(&after)
		grew := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s of %d topics in %d bytes: %d KiB allocated, answer %+v", c.t, n, len(body), grew>>10, a.Error)
		if a.Error == nil || a.Error.Code != wire.CodeBadRequest || !strings.Contains(a.Error.Message, c.want) {
			t.Errorf("%s: answer %+v, want code 1 saying %q", c.t, a.Error, c.want)
		}
		if grew > 1<<20 {
			t.Errorf("%s: refusing %d bytes allocated %d KiB", c.t, len(body), grew>>10)
		}
	}
}

// TestNamelessTopicsRefusedWhileDecoding: a broker's register of 2^20
// topics with empty names (a1 01 60, 3 bytes each: a 3 MiB frame) made the
// node allocate the whole 32 MiB []TopicConfig before validation refused
// the names, on every broker worker at once; a shape the fast decoder
// declines (an unknown key in each topic) went to the general decoder and
// allocated over 100 times the frame. The decoder now refuses the first
// invalid name, with the code and text the node gave before.
func TestNamelessTopicsRefusedWhileDecoding(t *testing.T) {
	tn := startNode(t, nil)
	cs := &connState{ctx: context.Background(), peer: peer{Identity: pki.Identity{Role: pki.RoleBroker}}}
	head := wire.AppendRegister(nil, &wire.Register{Cluster: "c", BrokerName: "b", Addr: "127.0.0.1:10911"})
	head = head[:len(head)-1] // the empty topics array, the last field
	n := 1 << 20
	head = append(head, 0x9a, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	for _, elem := range [][]byte{{0xa1, 0x01, 0x60}, {0xa1, 0x06, 0x00}} {
		body := append(bytes.Clone(head), bytes.Repeat(elem, n)...)
		f := &wire.Frame{Type: wire.TypeRegister, ID: 1, Body: body}
		var watch *watcher
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		a := tn.handle(cs, f, &streamWriter{}, &watch)
		runtime.ReadMemStats(&after)
		grew := after.TotalAlloc - before.TotalAlloc
		t.Logf("register of %d topics %x in %d bytes: %d KiB allocated, answer %+v", n, elem, len(body), grew>>10, a.Error)
		if a.Error == nil || a.Error.Code != wire.CodeBadRequest || !strings.Contains(a.Error.Message, "invalid topic name") {
			t.Errorf("topics %x: answer %+v, want code 1 saying invalid topic name", elem, a.Error)
		}
		if limit := 4 * uint64(len(body)); grew > limit {
			t.Errorf("topics %x: refusing %d bytes allocated %d KiB, want at most %d KiB", elem, len(body), grew>>10, limit>>10)
		}
	}
}

// TestStopSendingEndsTheNodesReadSideToo: a peer that stops reading a
// stream (STOP_SENDING) makes the node's next write fail, and the node
// stops serving the stream. It used to leave its read side open without a
// word: the peer could go on sending into a stream nobody read (its data
// kept in the node's buffers, the stream counted against its connection's
// stream limit) and never learn that its requests were dropped. The node
// now stops reading with STOP_SENDING 0x21 (PROTOCOL.md §1.2).
func TestStopSendingEndsTheNodesReadSideToo(t *testing.T) {
	tn := startNode(t, nil)
	s := rawStream(t, tn, pki.RoleClient)
	s.CancelRead(5)
	ping := pingBytes(1)
	// Each ping is answered into a stream that no longer reads: the first
	// answer fails, and then the node must stop this stream's reads too.
	var err error
	for i := 0; i < 2000 && err == nil; i++ {
		_, err = s.Write(ping)
		time.Sleep(2 * time.Millisecond)
	}
	var se *quic.StreamError
	if !errors.As(err, &se) || !se.Remote || se.ErrorCode != codeStreamAbort {
		t.Fatalf("writes into a stream whose answers the peer refused ended with %v, want STOP_SENDING 0x21 from the node", err)
	}
}

// pingBytes is a ping request frame with id, length prefix included.
func pingBytes(id uint64) []byte {
	f, _ := wire.NewRequest(wire.TypePing, id, nil)
	b, _ := wire.AppendFrame(nil, f)
	return b
}

// TestOneSourceIPCannotLockOutAnother: every per-IP limit is per IP, and
// brokers have a budget of their own on each. 127.0.0.2 fills its reader
// connections with three client certificates, 127.0.0.3 holds every
// handshake it may have in progress and never finishes one; meanwhile a
// client on 127.0.0.1 connects and reads, and a broker on 127.0.0.2 itself
// connects and registers.
func TestOneSourceIPCannotLockOutAnother(t *testing.T) {
	const perHost, handshakes = 4, 4
	tn := startNode(t, func(c *Config) {
		c.MaxConnsPerHost, c.MaxConnsPerIdentity, c.MaxHandshakesPerHost = perHost, 2, handshakes
	})
	ctx := ctxT(t)
	readers := transportFrom(t, "127.0.0.2")
	for i := range 3 {
		conf := tn.tlsFor(pki.RoleClient, fmt.Sprintf("flood-%d", i))
		for range 3 {
			if qc, err := dialFrom(tn, readers, conf, 5*time.Second); err == nil {
				defer qc.CloseWithError(0, "")
			}
		}
	}
	waitFor(t, "127.0.0.2 to fill its reader connections", func() bool {
		tn.adm.mu.Lock()
		defer tn.adm.mu.Unlock()
		return tn.adm.hosts[userClass]["127.0.0.2"] == perHost
	})

	sctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	dialDeafFrom(t, sctx, &wg, tn, "127.0.0.3", handshakes)
	waitFor(t, "127.0.0.3 to hold its handshakes", func() bool {
		tn.adm.mu.Lock()
		defer tn.adm.mu.Unlock()
		return tn.adm.handshaking["127.0.0.3"] == handshakes
	})

	b, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: tn.tlsFor(pki.RoleBroker, "broker-on-2"),
		Transport: readers})
	if err != nil {
		t.Fatalf("a broker on the flooded 127.0.0.2: %v", err)
	}
	defer b.Close()
	if _, err := b.Register(ctx, registration("c1", "b1", 0, "10.0.0.1:1", "t")); err != nil {
		t.Fatalf("a broker on the flooded 127.0.0.2 could not register: %v", err)
	}
	c := tn.dial(pki.RoleClient) // from 127.0.0.1
	if _, _, err := c.Route(ctx, "t", wire.ClientAttrs{}); err != nil {
		t.Fatalf("a client on 127.0.0.1 could not read: %v", err)
	}
}

// TestUnreadAnswersHeldWithinABudget: a get-routes naming one topic 10,000
// times is a 60 KB request and a 6 MB answer. A client that sends it on
// every stream of its connections and reads nothing made the node encode
// and hold every answer for the write timeout: 200 such streams held 1.2
// GiB of heap. Answers above a few KiB now take a budget of bytes being
// written before they are encoded (one wider than the budget takes all of
// it), and another client is still served.
func TestUnreadAnswersHeldWithinABudget(t *testing.T) {
	const budget = 16 << 20 // answers' budget too
	tn := startNode(t, func(c *Config) {
		c.MaxBytesInFlight = budget
		c.WriteTimeout = 30 * time.Second // nothing is reset while the test looks
	})
	routeRounds(t, tn, "amp-group-%d", "10.1.0.%d:10911", 8, []string{"big"})()
	q := &wire.GetRoutes{}
	for range 10_000 {
		q.Topics = append(q.Topics, wire.TopicVersion{Topic: "big"})
	}
	f, err := wire.NewRequest(wire.TypeGetRoutes, 1, q)
	if err != nil {
		t.Fatal(err)
	}
	req, err := wire.AppendFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	before := liveHeap()
	const streams = 50
	sendUnread(t, ctx, tn, "never-reads", streams, req)
	waitFor(t, "every request to be handled", func() bool {
		return metricValue(t, tn, "edgereg_route_reads_total") >= streams*10_000
	})
	// The answers are being encoded and written now; look for a while.
	peak := peakHeapGrowth(before)
	// Each stream still holds its decoded query and results while it waits
	// (10,000 of each: about 1 MiB, a bound of the request's bytes); the
	// answers themselves are within the budget.
	limit := uint64(budget + streams*(3<<19))
	t.Logf("%d streams of unread 6 MB answers: live heap grew by at most %d MiB (answer budget %d MiB, limit %d MiB)",
		streams, peak>>20, budget>>20, limit>>20)
	if peak > limit {
		t.Errorf("unread answers hold %d MiB, more than the %d MiB budget and 1.5 MiB per stream", peak>>20, budget>>20)
	}
	c := tn.dial(pki.RoleClient)
	if _, _, err := c.Route(ctxT(t), "big", wire.ClientAttrs{}); err != nil {
		t.Fatalf("another client's read while answers wait: %v", err)
	}
}

// TestRoutesAnswerBound: the size writeAnswer budgets a get-routes answer
// at before encoding it is never below what it encodes to.
func TestRoutesAnswerBound(t *testing.T) {
	route := bytes.Repeat([]byte{0x01}, 300) // any bytes: the encoder embeds them
	for _, n := range []int{0, 1, 23, 24, 255, 256, 70_000} {
		r := &wire.Routes{Node: wire.NodeState{NodeID: strings.Repeat("n", n%300), StartedMs: -1 << 62, WarmingUp: true}}
		for i := range max(n, 1) {
			r.Results = append(r.Results, wire.RouteResult{Topic: strings.Repeat("t", i%130), Status: wire.StatusOK,
				Version: ^uint64(0) >> (i % 64), Route: route[:i%300]})
		}
		for i := range n % 40 {
			r.Groups = append(r.Groups, wire.GroupFreshness{BrokerName: strings.Repeat("g", i*7), AgeMs: -1 << 62, DeadlineInMs: 1<<63 - 1})
		}
		a := &answer{Frame: wire.Frame{Type: wire.TypeGetRoutes, ID: ^uint64(0)}, routes: r}
		buf, err := appendAnswer(nil, a)
		if err != nil {
			t.Fatal(err)
		}
		if b := routesAnswerBound(r); b < len(buf) {
			t.Errorf("%d results: bound %d below the %d bytes encoded", len(r.Results), b, len(buf))
		}
	}
}

// TestUnreadTopicListsHeldOnePerConnection: a 5-byte topics or
// cluster-info request is answered with the whole registry's list; a
// client that sends it on every stream and reads nothing made the node
// build and hold one list per stream (16 bytes a topic, and the answer
// encoded). A connection's streams now have these answers made one at a
// time.
func TestUnreadTopicListsHeldOnePerConnection(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.WriteTimeout = 30 * time.Second })
	names := make([]string, 20_000)
	for i := range names {
		names[i] = fmt.Sprintf("listed-topic-%05d", i)
	}
	routeRounds(t, tn, "list-group-%d", "10.1.0.%d:10911", 1, names)()
	ctx := ctxT(t)
	req := func(ty wire.Type) []byte {
		f, _ := wire.NewRequest(ty, 1, nil)
		b, _ := wire.AppendFrame(nil, f)
		return b
	}
	before := liveHeap()
	const streams = 50
	sendUnread(t, ctx, tn, "lists", streams, req(wire.TypeTopics))
	waitFor(t, "the streams to be served", func() bool { return tn.stats.streams.Load() >= streams })
	peak := peakHeapGrowth(before)
	const limit = 8 << 20
	t.Logf("%d streams of unread topic lists (20,000 topics): live heap grew by at most %d KiB", streams, peak>>10)
	if peak > limit {
		t.Errorf("unread topic lists hold %d KiB, more than %d KiB", peak>>10, limit>>10)
	}
}

// TestStreamsEndingInsideAFrame (PROTOCOL.md §4.4): requests answered
// before a stream ends inside a frame stay answered, the partial frame
// gets no error frame, the node ends its side with a FIN, and a frame cut
// off by the peer's reset gives back its bytes in flight.
func TestStreamsEndingInsideAFrame(t *testing.T) {
	tn := startNode(t, nil)
	for name, end := range map[string]func(*quic.Stream){
		"FIN inside the prefix": func(s *quic.Stream) { s.Write([]byte{0, 0}); s.Close() },
		"FIN inside the body":   func(s *quic.Stream) { s.Write([]byte{0, 0, 0x10, 0, 0xa2, 0x01}); s.Close() },
		"reset inside the body": func(s *quic.Stream) {
			s.Write(append([]byte{0, 0, 0x10, 0}, make([]byte, 2000)...))
			waitFor(t, "the partial frame to take budget", func() bool { return tn.inFlight.used.Load() > 0 })
			s.CancelWrite(9)
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := rawStream(t, tn, pki.RoleClient)
			s.Write(append(pingBytes(1), pingBytes(2)...))
			end(s)
			for id := uint64(1); id <= 2; id++ {
				f, err := wire.ReadFrame(s, 1<<20)
				if err != nil || f.ID != id || f.Error != nil {
					t.Fatalf("answer %d: %+v, %v", id, f, err)
				}
			}
			if f, err := wire.ReadFrame(s, 1<<20); err != io.EOF {
				t.Fatalf("after the answers: %+v, %v; want the node's FIN", f, err)
			}
			waitFor(t, "the budget to come back", func() bool { return tn.inFlight.used.Load() == 0 })
		})
	}
}

// TestAnswerOverTheFrameCapIsAnError: an answer larger than the 64 MiB
// frame cap (a get-routes naming a topic of 90 groups 10,000 times) cannot
// be sent. The node used to end the stream with a FIN and no answer at
// all, which a client reads as "outcome unknown" and retries as it is;
// it now answers with code 2 naming the size, and the stream goes on.
func TestAnswerOverTheFrameCapIsAnError(t *testing.T) {
	tn := startNode(t, nil)
	routeRounds(t, tn, "wide-group-with-a-long-name-%03d", "10.7.0.%d:10911", 90, []string{"wide"})()
	q := &wire.GetRoutes{}
	for range 10_000 {
		q.Topics = append(q.Topics, wire.TopicVersion{Topic: "wide"})
	}
	f, err := wire.NewRequest(wire.TypeGetRoutes, 7, q)
	if err != nil {
		t.Fatal(err)
	}
	s := rawStream(t, tn, pki.RoleClient)
	// Only against a hang: the node encodes about 64 MiB of routes before
	// it knows the answer is too large, which under -race on a loaded
	// machine took longer than the 20 s this was.
	s.SetDeadline(time.Now().Add(3 * time.Minute))
	if err := wire.WriteFrame(s, f); err != nil {
		t.Fatal(err)
	}
	s.Write(pingBytes(8))
	resp, err := wire.ReadFrame(s, wire.MaxFrameLen)
	if err != nil {
		t.Fatalf("no answer to a request whose answer is over the frame cap: %v", err)
	}
	if resp.ID != 7 || resp.Error == nil || resp.Error.Code != wire.CodeFrameTooLarge || !strings.Contains(resp.Error.Message, "fewer") {
		t.Fatalf("answer of type %v (error %+v), want code 2 for request 7 asking for fewer topics", resp.Type, resp.Error)
	}
	if pong, err := wire.ReadFrame(s, 1<<20); err != nil || pong.ID != 8 || pong.Error != nil {
		t.Fatalf("the stream after the refusal: %+v, %v", pong, err)
	}
}

// sendUnread sends req with its FIN on each of n streams of a reader
// connection (certificate name) that never reads what the node answers:
// its receive windows are 16 KiB a stream and 64 KiB in all. The
// connection closes when the test ends.
func sendUnread(t *testing.T, ctx context.Context, tn *testNode, name string, n int, req []byte) {
	t.Helper()
	qc, err := quic.DialAddr(ctx, tn.Addr().String(), tn.tlsFor(pki.RoleClient, name), &quic.Config{
		InitialStreamReceiveWindow: 16 << 10, MaxStreamReceiveWindow: 16 << 10,
		InitialConnectionReceiveWindow: 64 << 10, MaxConnectionReceiveWindow: 64 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	for range n {
		s, err := qc.OpenStreamSync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Write(req)
		s.Close()
	}
}

// peakHeapGrowth samples the live heap for about a second and returns the
// most it grew over before.
func peakHeapGrowth(before uint64) uint64 {
	peak := uint64(0)
	for range 40 {
		if h := liveHeap(); h > before && h-before > peak {
			peak = h - before
		}
		time.Sleep(25 * time.Millisecond)
	}
	return peak
}

// TestOverlongUnwatchRefusedBeforeDecoding: get-routes and watch have their
// topic count checked on the array's header, but an unwatch was decoded in
// full: a 1 MiB frame of a million empty names, from an anonymous or client
// connection, allocated a 16 MiB []string per frame (16 times the bytes
// received, on every reader worker at once) to unwatch nothing. A
// connection watches at most --max-watches-per-conn topics, and one unwatch
// names at most as many as a watch may.
func TestOverlongUnwatchRefusedBeforeDecoding(t *testing.T) {
	tn := startNode(t, nil)
	s := rawStream(t, tn, pki.RoleClient)
	n := 1<<20 - 64 // fits a client's 1 MiB frame
	body := []byte{0xa1, 0x01, 0x9a, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	body = append(body, bytes.Repeat([]byte{0x60}, n)...)
	frame, err := wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeUnwatch, ID: 1, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	// Warm the stream and the connection up so that their own buffers are
	// not counted.
	if _, err := s.Write(pingBytes(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := wire.ReadFrame(s, 1<<20); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := s.Write(frame); err != nil {
		t.Fatal(err)
	}
	f, err := wire.ReadFrame(s, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	grew := after.TotalAlloc - before.TotalAlloc
	t.Logf("unwatch of %d names in %d bytes: %d KiB allocated in the process, answer %+v", n, len(frame), grew>>10, f.Error)
	if f.Error == nil || f.Error.Code != wire.CodeBadRequest || !strings.Contains(f.Error.Message, "more than 10000") {
		t.Errorf("answer %+v, want code 1 saying %q", f.Error, "more than 10000")
	}
	// The frame's own buffer and QUIC's packets: a few times the bytes
	// sent, never the 16 MiB of a decoded array.
	if limit := uint64(6 * len(frame)); grew > limit {
		t.Errorf("an unwatch of %d bytes allocated %d KiB, more than %d KiB", len(frame), grew>>10, limit>>10)
	}
	// The stream still answers.
	if _, err := s.Write(pingBytes(3)); err != nil {
		t.Fatal(err)
	}
	if f, err := wire.ReadFrame(s, 1<<20); err != nil || f.Error != nil {
		t.Fatalf("ping after the refusal: %+v, %v", f.Error, err)
	}
}

// TestOneSourceIPCannotHoldTheAnswerBudget: the readers' budget of answer
// bytes being written is shared by every reader of the node, and one
// answer wider than it takes all of it. One client on 127.0.0.2 that asks
// for such an answer and reads nothing held the whole budget for the write
// timeout, and a client on 127.0.0.1 whose answer needs budget waited for
// it until its own call gave up. A source IP now holds at most a quarter of
// the budget.
func TestOneSourceIPCannotHoldTheAnswerBudget(t *testing.T) {
	const budget = 16 << 20
	tn := startNode(t, func(c *Config) {
		c.MaxBytesInFlight = budget
		c.WriteTimeout = 10 * time.Minute // nothing is reset while the test looks
	})
	// 32 groups: about 2.5 kB a route, so 10,000 of them are wider than
	// the budget.
	routeRounds(t, tn, "hoard-group-%02d", "10.1.0.%d:10911", 32, []string{"big"})()
	q := &wire.GetRoutes{}
	for range 10_000 {
		q.Topics = append(q.Topics, wire.TopicVersion{Topic: "big"})
	}
	f, err := wire.NewRequest(wire.TypeGetRoutes, 1, q)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	qc, err := dialFrom(tn, transportFrom(t, "127.0.0.2"), tn.tlsFor(pki.RoleClient, "hoarder"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer qc.CloseWithError(0, "")
	s, err := qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.WriteFrame(s, f); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the unread answer to take budget", func() bool { return tn.answers.used.Load() > 0 })

	// A client elsewhere reads 40 routes: about 100 kB, an answer that
	// needs budget.
	c := tn.dial(pki.RoleClient)
	gr := &wire.GetRoutes{}
	for range 40 {
		gr.Topics = append(gr.Topics, wire.TopicVersion{Topic: "big"})
	}
	if _, err := c.GetRoutes(ctx, gr); err != nil {
		t.Fatalf("a client on another IP while 127.0.0.2 holds %d of the %d bytes of answer budget: %v",
			tn.answers.used.Load(), budget, err)
	}
}

// TestOneSourceIPCannotHoldTheRequestBudget: the readers' budget of bytes
// in flight is shared by every reader of the node. One client on
// 127.0.0.2 that sent most of a few 1 MiB frames on streams of its own and
// never finished them held all of it until its read timeout, and every
// other reader's request, a ping from 127.0.0.1 too, waited for budget.
// A source IP now holds at most a quarter of the budget (at least a
// frame).
func TestOneSourceIPCannotHoldTheRequestBudget(t *testing.T) {
	const budget, frame = 4 << 20, 1 << 20
	tn := startNode(t, func(c *Config) {
		c.MaxBytesInFlight, c.MaxRequestLen, c.MaxBrokerFrameLen = budget, frame, frame
		c.ReadTimeout = time.Minute // the hog holds what it took for the whole test
	})
	ctx := ctxT(t)
	hog, err := dialFrom(tn, transportFrom(t, "127.0.0.2"), tn.tlsFor(pki.RoleClient, "hog"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var writes sync.WaitGroup
	defer writes.Wait()
	defer hog.CloseWithError(0, "")
	for range budget / frame {
		s, err := hog.OpenStreamSync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		msg := make([]byte, wire.FrameHeaderLen+frame-1) // all but the last byte
		binary.BigEndian.PutUint32(msg, frame)
		writes.Go(func() { s.Write(msg) }) // ends with the connection
	}
	// Until the hog holds every byte, or at most a few seconds (the node
	// takes no more than the hog's share).
	for end := time.Now().Add(3 * time.Second); tn.inFlight.used.Load() < budget && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := tn.dial(pki.RoleClient).Ping(ctx); err != nil {
		t.Fatalf("a ping from another IP while 127.0.0.2 holds %d of the readers' %d bytes in flight: %v",
			tn.inFlight.used.Load(), budget, err)
	}
}

// TestStopSendingOnAWatchEndsTheWatch: a watcher that stops reading its
// watch stream (STOP_SENDING) made the node's next push fail, and the node
// stopped pushing to it, but the watch stayed: its topics subscribed and
// counted against the connection's and the node's watch budgets for as
// long as the peer kept its side of the stream open, with nothing ever
// pushed again. A stream whose write timed out was already reset both
// ways; this one is now ended too: the node stops reading (STOP_SENDING
// 0x21), the request loop ends and the watch is dropped.
func TestStopSendingOnAWatchEndsTheWatch(t *testing.T) {
	tn := startNode(t, nil)
	registerQueues(t, tn, "t", 1)
	s := rawStream(t, tn, pki.RoleClient)
	s.SetDeadline(time.Now().Add(30 * time.Second))
	f, err := wire.NewRequest(wire.TypeWatch, 1, &wire.Watch{Topics: []wire.TopicVersion{{Topic: "t"}}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := wire.AppendFrame(nil, f)
	if _, err := s.Write(b); err != nil {
		t.Fatal(err)
	}
	if _, err := wire.ReadFrame(s, wire.MaxFrameLen); err != nil { // the watch's answer
		t.Fatal(err)
	}
	waitFor(t, "the watch", func() bool { return tn.watches.subscriptions() == 1 })
	s.CancelRead(5)
	for q := uint32(2); tn.watches.subscriptions() != 0; q++ {
		if q > 500 {
			t.Fatalf("after %d route changes pushed into a stream its reader stopped, the watch still holds %d subscriptions", q, tn.watches.subscriptions())
		}
		registerQueues(t, tn, "t", q)
		time.Sleep(20 * time.Millisecond)
	}
	var se *quic.StreamError
	for i := 0; ; i++ {
		if _, err := s.Write(pingBytes(uint64(2 + i))); err != nil {
			if !errors.As(err, &se) || !se.Remote || se.ErrorCode != codeStreamAbort {
				t.Fatalf("a write after the watch ended: %v, want STOP_SENDING 0x21 from the node", err)
			}
			break
		}
		if i == 500 {
			t.Fatal("the node still reads a watch stream whose pushes the peer refused")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
