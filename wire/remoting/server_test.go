package remoting

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer serves h on a loopback port and shuts down at cleanup.
func startServer(t *testing.T, h Handler, lim Limits) (*Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: h, Limits: lim}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return s, l.Addr().String()
}

type client struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &client{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *client) send(cmd *Command) {
	c.t.Helper()
	if _, err := cmd.WriteTo(c.nc); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) recv() *Command {
	c.t.Helper()
	resp, err := ReadCommand(c.br, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// echo answers with the request's code as remark; code 999 panics; code
// 998 blocks until release is closed.
func echo(release chan struct{}) HandlerFunc {
	return func(ctx context.Context, _ net.Addr, req *Command) *Command {
		switch req.Code {
		case 999:
			panic("boom")
		case 998:
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return NewResponse(req, Success, req.Ext("v"))
	}
}

func TestServerPipelinedOutOfOrder(t *testing.T) {
	release := make(chan struct{})
	_, addr := startServer(t, echo(release), Limits{})
	c := dial(t, addr)
	c.send(NewRequest(998, 1, map[string]string{"v": "slow"}, nil))
	c.send(NewRequest(105, 2, map[string]string{"v": "fast"}, nil))
	if r := c.recv(); r.Opaque != 2 || r.Remark != "fast" || !r.IsResponse() {
		t.Fatalf("first answer %+v, want the fast one (opaque 2)", r)
	}
	close(release)
	if r := c.recv(); r.Opaque != 1 || r.Remark != "slow" {
		t.Fatalf("second answer %+v", r)
	}
}

func TestServerOnewayNeverAnswered(t *testing.T) {
	_, addr := startServer(t, echo(nil), Limits{})
	c := dial(t, addr)
	ow := NewRequest(904, 1, map[string]string{"v": "oneway"}, nil)
	ow.Flag = FlagOneway
	c.send(ow)
	c.send(NewRequest(105, 2, map[string]string{"v": "after"}, nil))
	if r := c.recv(); r.Opaque != 2 {
		t.Fatalf("got %+v: the oneway request was answered", r)
	}
}

func TestServerPanicBecomesSystemError(t *testing.T) {
	s, addr := startServer(t, echo(nil), Limits{})
	c := dial(t, addr)
	c.send(NewRequest(999, 5, nil, nil))
	if r := c.recv(); r.Code != SystemError || r.Opaque != 5 {
		t.Fatalf("panic answered %+v", r)
	}
	c.send(NewRequest(105, 6, map[string]string{"v": "alive"}, nil))
	if r := c.recv(); r.Remark != "alive" {
		t.Fatalf("connection after a panic: %+v", r)
	}
	if s.Stats().Panics != 1 {
		t.Fatalf("stats %+v", s.Stats())
	}
}

func TestServerClosesOnOversizedFrame(t *testing.T) {
	s, addr := startServer(t, echo(nil), Limits{MaxFrame: 1024})
	c := dial(t, addr)
	big := NewRequest(105, 1, nil, make([]byte, 2000))
	c.send(big)
	if _, err := ReadCommand(c.br, 0); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("after an oversized frame: %v, want the connection closed", err)
	}
	waitFor(t, func() bool { return s.Stats().BadFrames == 1 })
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("condition not reached in 10 s")
}

func TestServerConnectionLimits(t *testing.T) {
	s, addr := startServer(t, echo(nil), Limits{MaxConnsPerHost: 2})
	a, b := dial(t, addr), dial(t, addr)
	for i, c := range []*client{a, b} {
		c.send(NewRequest(105, int32(i), nil, nil))
		c.recv()
	}
	over := dial(t, addr)
	over.send(NewRequest(105, 9, nil, nil))
	if _, err := ReadCommand(over.br, 0); err == nil {
		t.Fatal("third connection from one host was served")
	}
	if st := s.Stats(); st.Rejected != 1 || st.Conns != 2 {
		t.Fatalf("stats %+v", st)
	}
	// A slot freed is a slot reusable.
	a.nc.Close()
	waitFor(t, func() bool { return s.Stats().Conns == 1 })
	d := dial(t, addr)
	d.send(NewRequest(105, 10, nil, nil))
	if r := d.recv(); r.Opaque != 10 {
		t.Fatalf("%+v", r)
	}
}

// TestServerWorkerPoolBounded: with one worker and one request blocked in
// it, a second connection's request waits rather than running.
func TestServerWorkerPoolBounded(t *testing.T) {
	release := make(chan struct{})
	var running, peak atomic.Int32
	h := HandlerFunc(func(ctx context.Context, p net.Addr, req *Command) *Command {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		return echo(release)(ctx, p, req)
	})
	_, addr := startServer(t, h, Limits{Workers: 1})
	a, b := dial(t, addr), dial(t, addr)
	a.send(NewRequest(998, 1, nil, nil))
	waitFor(t, func() bool { return running.Load() == 1 })
	b.send(NewRequest(105, 2, nil, nil))
	time.Sleep(50 * time.Millisecond) // give a wrongly unbounded pool the chance to run it
	if running.Load() != 1 {
		t.Fatal("a second handler runs beside the first with Workers: 1")
	}
	close(release)
	a.recv()
	if r := b.recv(); r.Opaque != 2 {
		t.Fatalf("%+v", r)
	}
	if peak.Load() != 1 {
		t.Fatalf("peak handlers %d with Workers: 1", peak.Load())
	}
}

func TestServerShutdownFinishesInFlight(t *testing.T) {
	release := make(chan struct{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var closed sync.WaitGroup
	closed.Add(1)
	h := HandlerFunc(func(ctx context.Context, p net.Addr, req *Command) *Command {
		ci, _ := ConnFromContext(ctx)
		ci.OnClose(closed.Done)
		return echo(release)(ctx, p, req)
	})
	s := &Server{Handler: h}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	c := dial(t, l.Addr().String())
	c.send(NewRequest(998, 1, map[string]string{"v": "finished"}, nil))
	waitFor(t, func() bool { return s.Stats().Requests == 1 })
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	close(release)
	if r := c.recv(); r.Remark != "finished" {
		t.Fatalf("in-flight answer %+v", r)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	closed.Wait() // the close hook ran
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Fatal("listener still accepts after Shutdown")
	}
}

func TestServerShutdownDeadline(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: echo(make(chan struct{}))} // never released: only ctx ends it
	go s.Serve(l)
	c := dial(t, l.Addr().String())
	c.send(NewRequest(998, 1, nil, nil))
	waitFor(t, func() bool { return s.Stats().Requests == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown past its deadline: %v", err)
	}
}

func TestServerIdleTimeout(t *testing.T) {
	s, addr := startServer(t, echo(nil), Limits{IdleTimeout: 100 * time.Millisecond})
	c := dial(t, addr)
	c.send(NewRequest(105, 1, nil, nil))
	c.recv()
	if _, err := ReadCommand(c.br, 0); err == nil {
		t.Fatal("idle connection got a frame")
	}
	waitFor(t, func() bool { return s.Stats().Conns == 0 })
}

// TestServerFrameTimeout: a frame that starts and never finishes is cut off,
// so a trickling peer cannot hold its buffer.
func TestServerFrameTimeout(t *testing.T) {
	s, addr := startServer(t, echo(nil), Limits{FrameTimeout: 100 * time.Millisecond})
	c := dial(t, addr)
	if _, err := c.nc.Write([]byte{0, 0, 1, 0, 0}); err != nil { // 256 bytes declared, 1 sent
		t.Fatal(err)
	}
	if _, err := ReadCommand(c.br, 0); err == nil {
		t.Fatal("a stalled frame got an answer")
	}
	waitFor(t, func() bool { return s.Stats().Conns == 0 })
}

// TestServerInFlightPerConn: with one request in flight allowed per
// connection, a pipelined second one waits for the first, while another
// connection is served.
func TestServerInFlightPerConn(t *testing.T) {
	release := make(chan struct{})
	var running atomic.Int32
	h := HandlerFunc(func(ctx context.Context, p net.Addr, req *Command) *Command {
		running.Add(1)
		defer running.Add(-1)
		return echo(release)(ctx, p, req)
	})
	_, addr := startServer(t, h, Limits{MaxInFlightPerConn: 1})
	a, b := dial(t, addr), dial(t, addr)
	a.send(NewRequest(998, 1, nil, nil))
	a.send(NewRequest(105, 2, nil, nil))
	waitFor(t, func() bool { return running.Load() == 1 })
	b.send(NewRequest(105, 3, nil, nil))
	if r := b.recv(); r.Opaque != 3 {
		t.Fatalf("other connection: %+v", r)
	}
	close(release)
	// Without the bound the quick request would be answered first.
	if r := a.recv(); r.Opaque != 1 {
		t.Fatalf("first answer on a: %+v, want the blocked request's", r)
	}
	if r := a.recv(); r.Opaque != 2 {
		t.Fatalf("second answer on a: %+v", r)
	}
}

// TestServerSlowReaderHoldsNoWorker: a peer that never reads its responses
// blocks only its own connection; with one worker, another connection is
// still served.
func TestServerSlowReaderHoldsNoWorker(t *testing.T) {
	_, addr := startServer(t, echo(nil), Limits{Workers: 1, WriteTimeout: time.Minute, MaxHeader: 2 << 20})
	slow := dial(t, addr)
	if tcp, ok := slow.nc.(*net.TCPConn); ok {
		tcp.SetReadBuffer(4 << 10)
	}
	// Responses of 1 MiB each that nobody reads: the server's writes block.
	big := strings.Repeat("x", 1<<20)
	for i := range DefaultMaxInFlightPerConn {
		slow.send(NewRequest(105, int32(i), map[string]string{"v": big}, nil))
	}
	time.Sleep(100 * time.Millisecond) // let the server fill the socket buffers
	fast := dial(t, addr)
	fast.send(NewRequest(105, 99, map[string]string{"v": "ok"}, nil))
	if r := fast.recv(); r.Opaque != 99 {
		t.Fatalf("%+v", r)
	}
	slow.nc.Close()
}

// TestServerBufferedBytesBudget: request bytes held across all connections
// stay within MaxBufferedBytes. With a budget of two 512 KiB frames and
// handlers that block, eight connections sending one such frame each get
// exactly two into handlers; the rest wait unread until those finish, and
// then every one is answered.
func TestServerBufferedBytesBudget(t *testing.T) {
	const frameBody = 512 << 10
	release := make(chan struct{})
	var entered atomic.Int32
	h := HandlerFunc(func(ctx context.Context, _ net.Addr, req *Command) *Command {
		entered.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return NewResponse(req, Success, "")
	})
	budget := int64(2 * (frameBody + 64<<10))
	s, addr := startServer(t, h, Limits{MaxFrame: 1 << 20, MaxBufferedBytes: budget, MaxBufferedBytesPerHost: budget})
	const conns = 8
	clients := make([]*client, conns)
	var wg sync.WaitGroup
	for i := range clients {
		clients[i] = dial(t, addr)
		wg.Go(func() {
			// The write blocks once the server stops reading; that is the point.
			NewRequest(105, int32(i), nil, make([]byte, frameBody)).WriteTo(clients[i].nc)
		})
	}
	waitFor(t, func() bool { return entered.Load() >= 2 })
	// Give the other six every chance to slip past the budget.
	for i := 0; i < 50 || s.Stats().BudgetWaits == 0; i++ {
		if i > 5000 {
			t.Fatal("no frame waited for the budget")
		}
		if n := entered.Load(); n > 2 {
			t.Fatalf("%d handlers hold a 512 KiB frame each; the budget allows 2", n)
		}
		if b := s.Stats().BufferedBytes; b > budget {
			t.Fatalf("%d bytes buffered, budget %d", b, budget)
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(release)
	for i, c := range clients {
		if r := c.recv(); r.Opaque != int32(i) || r.Code != Success {
			t.Fatalf("answer %d: %+v", i, r)
		}
	}
	wg.Wait()
	waitFor(t, func() bool { return s.Stats().BufferedBytes == 0 })
}

// TestServerHeaderOnlyConnsHoldLittle: connections that declare a 16 MiB
// frame and send only its first bytes hold memory for what they sent, not
// for what they declared. Their declared lengths take the budget: eight fit
// in the default 128 MiB, the others wait unread.
func TestServerHeaderOnlyConnsHoldLittle(t *testing.T) {
	const conns = 200
	s, addr := startServer(t, echo(nil), Limits{MaxConnsPerHost: conns, FrameTimeout: time.Minute,
		MaxBufferedBytesPerHost: DefaultMaxBufferedBytes}) // every connection is from 127.0.0.1
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	frame := binary.BigEndian.AppendUint32(nil, DefaultMaxFrame-4) // the largest frame allowed
	frame = binary.BigEndian.AppendUint32(frame, 1000)             // a JSON header of 1000 bytes…
	frame = append(frame, `{"code":105`...)                        // …that never arrives
	for range conns {
		c := dial(t, addr)
		if _, err := c.nc.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
	const fit = DefaultMaxBufferedBytes / (DefaultMaxFrame - 4)
	waitFor(t, func() bool {
		st := s.Stats()
		return st.Conns == conns && st.BudgetWaits == conns-fit && st.BufferedBytes == fit*(DefaultMaxFrame-4)
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	perConn := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / conns
	t.Logf("heap growth per connection holding a declared 16 MiB frame: %d bytes; budget taken %d bytes by %d frames",
		perConn, s.Stats().BufferedBytes, fit)
	if perConn > 64<<10 {
		t.Fatalf("each connection holds %d bytes of heap for a frame it did not send", perConn)
	}
}

// TestServerPipelinerNotReading: a peer that pipelines thousands of
// requests and reads no response holds only its own connection: others
// are served meanwhile, and once a response cannot be written within
// WriteTimeout the connection is closed and counted.
func TestServerPipelinerNotReading(t *testing.T) {
	big := make([]byte, 64<<10)
	h := HandlerFunc(func(_ context.Context, _ net.Addr, req *Command) *Command {
		r := NewResponse(req, Success, "")
		r.Body = big
		return r
	})
	s, addr := startServer(t, h, Limits{WriteTimeout: 300 * time.Millisecond})
	slow := dial(t, addr)
	if tcp, ok := slow.nc.(*net.TCPConn); ok {
		tcp.SetReadBuffer(4 << 10)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		frame, _ := NewRequest(105, 1, map[string]string{"topic": "t"}, nil).Encode()
		for range 5000 {
			if _, err := slow.nc.Write(frame); err != nil {
				return // closed by the server: expected
			}
		}
	})
	fast := dial(t, addr)
	for i := range 20 {
		fast.send(NewRequest(105, int32(i), nil, nil))
		if r := fast.recv(); r.Opaque != int32(i) {
			t.Fatalf("other connection: %+v", r)
		}
	}
	waitFor(t, func() bool { return s.Stats().WriteFailures == 1 && s.Stats().Conns == 1 })
	slow.nc.Close()
	wg.Wait()
}

// TestServerHeaderCap: a NameServer's requests have headers of a few
// hundred bytes, and a header is decoded (into a map of every extFields
// entry, several times its size) before any worker is taken. A header
// larger than MaxHeader closes the connection like any bad frame, checked
// before the frame's remaining bytes are read.
func TestServerHeaderCap(t *testing.T) {
	s, addr := startServer(t, echo(nil), Limits{MaxHeader: 4 << 10})
	ok := dial(t, addr)
	ok.send(NewRequest(105, 1, map[string]string{"v": strings.Repeat("x", 3<<10)}, nil))
	if r := ok.recv(); r.Opaque != 1 {
		t.Fatalf("a 3 KiB header: %+v", r)
	}
	c := dial(t, addr)
	c.send(NewRequest(105, 2, map[string]string{"v": strings.Repeat("x", 100<<10)}, nil))
	if r, err := ReadCommand(c.br, 0); err == nil {
		t.Fatalf("a 100 KiB header was answered (code %d, opaque %d)", r.Code, r.Opaque)
	}
	waitFor(t, func() bool { return s.Stats().BadFrames == 1 })
}

// TestServerBudgetSharePerHost: one host that declares frames and trickles
// them holds only its share of the budget, so another host's frames are
// still read and answered.
func TestServerBudgetSharePerHost(t *testing.T) {
	const frame = 1 << 20
	s, addr := startServer(t, echo(nil), Limits{MaxFrame: frame, MaxBufferedBytes: 2 * frame, MaxBufferedBytesPerHost: frame,
		FrameTimeout: time.Minute})
	declared := binary.BigEndian.AppendUint32(nil, frame-4) // the largest frame…
	declared = binary.BigEndian.AppendUint32(declared, 100) // …that never arrives
	for range 2 {
		c := dial(t, addr)
		if _, err := c.nc.Write(declared); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return s.Stats().BufferedBytes == frame-4 && s.Stats().BudgetWaits == 1 })
	// Another host: 127.0.0.2 is on the loopback interface too.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("no second loopback address: %v", err)
	}
	other := &client{t: t, nc: nc, br: bufio.NewReader(nc)}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	other.send(NewRequest(105, 7, map[string]string{"v": "other host"}, make([]byte, 512<<10)))
	if r := other.recv(); r.Opaque != 7 || r.Remark != "other host" {
		t.Fatalf("other host: %+v", r)
	}
}

// dialFrom dials addr from another loopback address (Linux routes all of
// 127/8 to lo), as a peer on another host would.
func dialFrom(t *testing.T, ip net.IP, addr string) *client {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("no loopback address %s: %v", ip, err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	return &client{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// TestServerWorkerSharePerHost: one host pipelining requests that wait
// (a gateway's route lookups while the WAN is cut wait up to 4 s each) holds
// at most its share of the workers, so another host's requests are still
// answered at once instead of queueing behind it.
func TestServerWorkerSharePerHost(t *testing.T) {
	release := make(chan struct{})
	var slow atomic.Int32
	h := HandlerFunc(func(ctx context.Context, p net.Addr, req *Command) *Command {
		if req.Code == 998 {
			slow.Add(1)
			defer slow.Add(-1)
		}
		return echo(release)(ctx, p, req)
	})
	s, addr := startServer(t, h, Limits{Workers: 4})
	defer close(release)
	for i := range 2 { // two connections of one host, two requests each: every worker
		c := dialFrom(t, net.IPv4(127, 0, 0, 2), addr)
		for j := range 2 {
			c.send(NewRequest(998, int32(10*i+j), nil, nil))
		}
	}
	waitFor(t, func() bool { return slow.Load() >= 2 })
	time.Sleep(100 * time.Millisecond) // give a host without a share the chance to take every worker
	if n := slow.Load(); n > 2 {
		t.Errorf("one host holds %d of 4 workers", n)
	}
	other := dialFrom(t, net.IPv4(127, 0, 0, 3), addr)
	other.nc.SetDeadline(time.Now().Add(5 * time.Second))
	other.send(NewRequest(105, 7, map[string]string{"v": "other host"}, nil))
	r, err := ReadCommand(other.br, 0)
	if err != nil {
		t.Fatalf("another host's request while one host waits in %d handlers (stats %+v): %v", slow.Load(), s.Stats(), err)
	}
	if r.Opaque != 7 || r.Remark != "other host" {
		t.Fatalf("other host: %+v", r)
	}
}

// TestServerDeclaredFramesDoNotStallSmallRequests: frames that are only
// declared (a length prefix claiming the largest frame, then nothing) take
// the budget for their declared size, but a small request that has arrived
// in full (every client request and heartbeat) is never held up by them:
// four hosts with one such frame each used to spend the whole budget and
// every other host's requests waited for FrameTimeout, then were closed.
func TestServerDeclaredFramesDoNotStallSmallRequests(t *testing.T) {
	const frame = 1 << 20
	s, addr := startServer(t, echo(nil), Limits{MaxFrame: frame, MaxBufferedBytes: 4 * frame, FrameTimeout: time.Minute})
	declared := binary.BigEndian.AppendUint32(nil, frame-4) // the largest frame…
	declared = binary.BigEndian.AppendUint32(declared, 100) // …that never arrives
	for h := range 4 {
		c := dialFrom(t, net.IPv4(127, 0, 0, byte(2+h)), addr)
		if _, err := c.nc.Write(declared); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return s.Stats().BufferedBytes >= 4*(frame-4) })
	other := dialFrom(t, net.IPv4(127, 0, 0, 6), addr)
	other.nc.SetDeadline(time.Now().Add(5 * time.Second))
	for i := range 3 {
		other.send(NewRequest(105, int32(i), map[string]string{"v": "small"}, []byte(`{"counter":1}`)))
		r, err := ReadCommand(other.br, 0)
		if err != nil {
			t.Fatalf("small request %d while declared frames hold the budget (stats %+v): %v", i, s.Stats(), err)
		}
		if r.Opaque != int32(i) || r.Remark != "small" {
			t.Fatalf("small request %d: %+v", i, r)
		}
	}
}

// emfileOnce is a listener whose first Accept fails as accept(2) does when
// the process is out of file descriptors.
type emfileOnce struct {
	net.Listener
	failed atomic.Bool
}

func (l *emfileOnce) Accept() (net.Conn, error) {
	if !l.failed.Swap(true) {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestServerSurvivesRunningOutOfFiles: accept(2) failing for lack of file
// descriptors (a flood of connections, a low ulimit) is transient: the
// server backs off and accepts again once connections close, rather than
// stop serving for good (the gateway exited on it, a node's listener stayed
// dead).
func TestServerSurvivesRunningOutOfFiles(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: echo(nil)}
	done := make(chan error, 1)
	go func() { done <- s.Serve(&emfileOnce{Listener: ln}) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-done
	})
	c := dial(t, ln.Addr().String())
	c.send(NewRequest(105, 1, map[string]string{"v": "after EMFILE"}, nil))
	resp, err := ReadCommand(c.br, 0)
	if err != nil {
		select {
		case err := <-done:
			t.Fatalf("Serve returned %v after one EMFILE", err)
		default:
		}
		t.Fatal(err)
	}
	if resp.Remark != "after EMFILE" {
		t.Fatalf("%+v", resp)
	}
}
