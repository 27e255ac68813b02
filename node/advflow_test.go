package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// delayedConn delays every packet it sends by d: the peer measures a
// round trip d longer, as over a real network, so quic-go's window
// auto-tuning (which grows a window read faster than in a few round
// trips) behaves on loopback as it does on a WAN.
type delayedConn struct {
	net.PacketConn
	d time.Duration
}

// SetReadBuffer and SetWriteBuffer let quic-go size the socket's buffers
// as it does a *net.UDPConn's (and not warn that it cannot).
func (c *delayedConn) SetReadBuffer(n int) error {
	return c.PacketConn.(*net.UDPConn).SetReadBuffer(n)
}

func (c *delayedConn) SetWriteBuffer(n int) error {
	return c.PacketConn.(*net.UDPConn).SetWriteBuffer(n)
}

func (c *delayedConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	b := append([]byte(nil), p...)
	time.AfterFunc(c.d, func() { c.PacketConn.WriteTo(b, addr) })
	return len(p), nil
}

// delayedTransportFrom is transportFrom with every packet sent d late.
func delayedTransportFrom(t *testing.T, ip string, d time.Duration) *quic.Transport {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: &delayedConn{PacketConn: udp, d: d}}
	t.Cleanup(func() { tr.Close(); udp.Close() })
	return tr
}

// garbageFrame is a frame of n body bytes that do not decode: the node
// reads it whole and answers it with an error frame, and the stream goes
// on.
func garbageFrame(n int) []byte {
	b := make([]byte, 4+n)
	binary.BigEndian.PutUint32(b, uint32(n))
	for i := 4; i < len(b); i++ {
		b[i] = 0xff
	}
	return b
}

// unreadBytesHeld measures what one connection of role can make the node
// hold in quic-go's receive buffers, unread: first it sends fast into
// streams the node reads (so that window auto-tuning grows the windows),
// then it stops reading the node's answers, so that every stream server
// blocks writing an answer and reads nothing more, and pushes as much as
// flow control lets it into those streams. It returns the bytes the node
// took in that second phase.
func unreadBytesHeld(t *testing.T, tn *testNode, tr *quic.Transport, role pki.Role, name string, streams, warmup int) int64 {
	t.Helper()
	ctx := ctxT(t)
	addr, err := net.ResolveUDPAddr("udp", tn.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// The client's own windows are tiny and never grow: once it stops
	// reading, the node's answers block within a few frames.
	qc, err := tr.Dial(ctx, addr, tn.tlsFor(role, name), &quic.Config{
		InitialStreamReceiveWindow: 1 << 10, MaxStreamReceiveWindow: 1 << 10,
		InitialConnectionReceiveWindow: 1 << 10, MaxConnectionReceiveWindow: 1 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	var reading atomic.Bool
	reading.Store(true)
	ss := make([]*quic.Stream, streams)
	for i := range ss {
		if ss[i], err = qc.OpenStreamSync(ctx); err != nil {
			t.Fatal(err)
		}
		go func(s *quic.Stream) { // reads answers until told to stop
			buf := make([]byte, 4<<10)
			for reading.Load() {
				if _, err := s.Read(buf); err != nil {
					return
				}
			}
		}(ss[i])
	}
	// Phase 1: warmup bytes per stream, read by the node as fast as they
	// come.
	frame := garbageFrame(64 << 10)
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent := 0; sent < warmup; sent += len(frame) {
				s.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if _, err := s.Write(frame); err != nil {
					t.Errorf("warm-up write: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// Phase 2: stop reading, and give every stream server answers to
	// write that cannot be taken (tiny frames, an error answer each).
	reading.Store(false)
	tiny := garbageFrame(1)
	for _, s := range ss {
		for range 200 {
			s.Write(tiny)
		}
	}
	var held atomic.Int64
	// Frames too, so that a stream server that is not blocked yet reads
	// at most one before its answer blocks (zeros would be an empty
	// frame, and a stream the node stops reading).
	var bulk []byte
	for len(bulk) < 32<<20 {
		bulk = append(bulk, frame...)
	}
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.SetWriteDeadline(time.Now().Add(2 * time.Second))
			n, err := s.Write(bulk)
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("bulk write: %v", err)
			}
			held.Add(int64(n))
		}()
	}
	wg.Wait()
	return held.Load()
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestUnreadStreamDataHeldWithinReaderWindows: data a peer sends that the
// node has not read yet sits in quic-go's buffers, outside the node's
// byte budget, up to the connection's receive window. quic-go's defaults
// let that window grow to 15 MiB per connection (6 MiB per stream): 64
// reader connections from one IP could make the node hold 960 MiB. A
// reader's requests are small, so a reader connection's window now stays
// at its initial connWindow.
func TestUnreadStreamDataHeldWithinReaderWindows(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.WriteTimeout = 30 * time.Second })
	tr := delayedTransportFrom(t, "127.0.0.2", 10*time.Millisecond)
	before := heapInUse()
	held := unreadBytesHeld(t, tn, tr, pki.RoleClient, "hog", 8, 1<<20)
	t.Logf("one reader connection: %d KiB taken into streams the node does not read; heap in use grew by %d KiB",
		held>>10, (int64(heapInUse())-int64(before))>>10)
	if limit := int64(connWindow) + 16<<10; held > limit {
		t.Errorf("one reader connection made the node hold %d bytes unread, more than its window %d", held, connWindow)
	}
}

// TestBrokerWindowsGrowWithinOneBudget: a broker's or operator's window
// may grow past connWindow, for large registrations, but all of their
// growth comes from one node-wide budget (MaxBytesInFlight), given back
// when their connections end: broker certificates cannot make the node
// hold 16 MiB unread per connection either.
func TestBrokerWindowsGrowWithinOneBudget(t *testing.T) {
	const budget = 1 << 20
	tn := startNode(t, func(c *Config) {
		c.WriteTimeout = 30 * time.Second
		c.MaxRequestLen, c.MaxBrokerFrameLen, c.MaxBytesInFlight = 256<<10, 256<<10, budget
	})
	tr := delayedTransportFrom(t, "127.0.0.3", 10*time.Millisecond)
	var held [2]int64
	var wg sync.WaitGroup
	for i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held[i] = unreadBytesHeld(t, tn, tr, pki.RoleBroker, fmt.Sprintf("broker-%d", i), 6, 1<<20)
		}()
	}
	wg.Wait()
	t.Logf("two broker connections: %d and %d KiB taken into streams the node does not read (window budget %d KiB)",
		held[0]>>10, held[1]>>10, budget>>10)
	if limit := int64(2*connWindow+budget) + 32<<10; held[0]+held[1] > limit {
		t.Errorf("two broker connections made the node hold %d bytes unread, more than their windows and the budget, %d", held[0]+held[1], limit)
	}
	tn.conns.Range(func(k, _ any) bool {
		k.(*quic.Conn).CloseWithError(0, "")
		return true
	})
	waitFor(t, "the window budget to be given back", func() bool {
		tn.adm.windows.mu.Lock()
		defer tn.adm.windows.mu.Unlock()
		return tn.adm.windows.left == budget
	})
}

// BenchmarkLargeRegistration registers a broker of 100,000 topics (a
// frame of a few MiB) over loopback, each on a fresh connection as a
// broker does once it connects: what the receive windows, starting at
// connWindow and grown within the brokers' window budget, cost a large
// registration.
func BenchmarkLargeRegistration(b *testing.B) {
	tn := startNode(b, nil)
	topics := make([]string, 100_000)
	for i := range topics {
		topics[i] = fmt.Sprintf("bench-topic-%06d", i)
	}
	reg := registration("c", "big", 0, "10.0.0.1:10911", topics...)
	conf := tn.tlsFor(pki.RoleBroker, "big-broker")
	b.ReportAllocs()
	var sent, got uint64
	for b.Loop() {
		c := tn.dialTLS(conf)
		reg.DataVersion.Counter++
		if _, err := c.Register(context.Background(), reg); err != nil {
			b.Fatal(err)
		}
		st := c.Stats()
		sent, got = sent+st.PacketsSent, got+st.PacketsReceived
		c.Close()
	}
	// Packets, unlike time, are not distorted by a loaded machine: the
	// node's answers are mostly acknowledgements and window updates.
	b.ReportMetric(float64(sent)/float64(b.N), "pkts-sent/op")
	b.ReportMetric(float64(got)/float64(b.N), "pkts-from-node/op")
}

// TestOneBrokerCertificateCannotFillTheNode: broker and operator
// connections were bounded per source IP only (1,024), so one broker
// certificate dialling from a few IPs (about 10 by default) took every
// connection of the node, and every other broker was refused before its
// handshake. A broker certificate now has a limit over all IPs; past it,
// its own connections without a live session are replaced, or the newest
// is refused, and the node has room for other brokers.
func TestOneBrokerCertificateCannotFillTheNode(t *testing.T) {
	const maxConns, perHost, perIdent = 24, 8, 8
	tn := startNode(t, func(c *Config) {
		c.MaxConns, c.MaxBrokerConnsPerHost, c.MaxBrokerConnsPerIdentity = maxConns, perHost, perIdent
	})
	flood := tn.tlsFor(pki.RoleBroker, "flooding-broker")
	dialed := 0
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		tr := transportFrom(t, ip)
		for range perHost + 2 {
			if qc, err := dialFrom(tn, tr, flood, 5*time.Second); err == nil {
				dialed++
				defer qc.CloseWithError(0, "")
			}
		}
	}
	held := func() int {
		tn.adm.mu.Lock()
		defer tn.adm.mu.Unlock()
		if tn.adm.handshakes > 0 {
			return -1
		}
		n := 0
		for _, l := range tn.adm.idents {
			n += len(l)
		}
		return n
	}
	waitFor(t, "the flood's handshakes to end", func() bool { return held() >= 0 })
	t.Logf("one broker certificate from 3 IPs: %d dials succeeded, %d connections held of the node's %d", dialed, held(), maxConns)
	// Another broker, with its own certificate, on another IP, still gets
	// in and registers.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: tn.tlsFor(pki.RoleBroker, "honest-broker")})
	if err != nil {
		t.Fatalf("another broker could not connect while one certificate flooded the node: %v", err)
	}
	defer c.Close()
	if _, err := c.Register(ctx, registration("c", "honest", 0, "10.0.0.9:10911", "honest-topic")); err != nil {
		t.Fatalf("another broker could not register while one certificate flooded the node: %v", err)
	}
	if n := held(); n > perIdent+1 {
		t.Errorf("the flooding certificate holds %d connections, over its limit %d", n-1, perIdent)
	}
}

// TestBrokerIdentityLimitReplacesOnlyDeadConnections checks the rule on
// its own: a broker certificate at its limit over several hosts replaces
// its least recently active connection without a live session, on any
// host; when every one holds a live session the newcomer is refused.
func TestBrokerIdentityLimitReplacesOnlyDeadConnections(t *testing.T) {
	ad := newAdmission(Config{MaxConns: 20, MaxBrokerConnsPerHost: 3, MaxBrokerConnsPerIdentity: 2}.WithDefaults())
	live := map[string]bool{}
	ad.leaseLive = func(cluster, addr string) bool { return live[cluster+"/"+addr] }
	seq := int64(0)
	admit := func(host string) (*admitted, *admitted, string) {
		seq++
		a := &admitted{host: host, ident: "shared", class: brokerClass}
		a.last.Store(seq)
		v, reason := placeAndCount(ad, a)
		return a, v, reason
	}
	a1, _, _ := admit("h1")
	a2, _, _ := admit("h2")
	// Neither holds a session (never registered): a third on h3 replaces
	// the oldest, on another host.
	a3, v, reason := admit("h3")
	if reason != "" || v != a1 {
		t.Fatalf("third connection of a certificate at its limit: victim %v, reason %q; want the oldest replaced", v, reason)
	}
	for i, a := range []*admitted{a2, a3} {
		addr := fmt.Sprintf("10.0.0.%d:10911", i)
		live["c/"+addr] = true
		ad.holdSession(a, "c", addr)
	}
	// Both hold live sessions: the newcomer is refused, nobody replaced.
	if _, v, reason := admit("h4"); reason != refusedPerIdentity || v != nil {
		t.Fatalf("newcomer of a certificate whose connections all hold live sessions: victim %v, reason %q; want refused", v, reason)
	}
	if n := len(ad.idents["shared"]); n != 2 {
		t.Fatalf("the certificate holds %d connections, want its limit 2", n)
	}
}
