package remoting

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/edgereg/edgereg/wire/ratelog"
)

// Handler answers remoting requests. ServeRemoting is called once per
// request, concurrently (requests on one connection are pipelined and may be
// answered out of order, matched by opaque). It returns the response, or nil
// for a oneway request; a response returned to a oneway request is dropped.
// Returning nil to a two-way request leaves the caller to time out, which is
// sometimes the right answer (a node that is not ready must not say "no such
// topic"). The response's Opaque and response flag are set by the Server.
// ctx is cancelled when the connection closes; ConnFromContext(ctx) gives
// the connection.
type Handler interface {
	ServeRemoting(ctx context.Context, peer net.Addr, req *Command) *Command
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, peer net.Addr, req *Command) *Command

// ServeRemoting calls f.
func (f HandlerFunc) ServeRemoting(ctx context.Context, peer net.Addr, req *Command) *Command {
	return f(ctx, peer, req)
}

// Limits bound what peers may hold of a Server. Zero fields take the
// defaults.
type Limits struct {
	// MaxConns bounds connections in total (default 1024), MaxConnsPerHost
	// per source IP (default 64). A connection over a limit is closed at
	// once.
	MaxConns, MaxConnsPerHost int
	// MaxFrame caps a frame, length prefix included (default DefaultMaxFrame,
	// RocketMQ's 16 MiB). A larger declared frame closes the connection, as
	// Netty's decoder does, before its body is read.
	MaxFrame int
	// IdleTimeout closes a connection that starts no frame for this long
	// (default 120 s, a NameServer's serverChannelMaxIdleTimeSeconds; brokers
	// register every 30 s, clients poll every 30 s).
	IdleTimeout time.Duration
	// FrameTimeout is how long a frame may take to arrive once its first byte
	// has (default 30 s), so a trickled frame cannot hold its buffer forever.
	FrameTimeout time.Duration
	// WriteTimeout bounds writing one response (default 10 s).
	WriteTimeout time.Duration
	// Workers bounds handlers running at once across all connections
	// (default 64). When all are busy, connections stop being read: the
	// back-pressure reaches peers through TCP instead of RocketMQ's
	// SYSTEM_BUSY answers.
	Workers int
	// MaxInFlightPerConn bounds the requests of one connection in handlers
	// at once (default 16), so one pipelining peer cannot take every worker.
	MaxInFlightPerConn int
	// MaxInFlightPerHost bounds the requests of all the connections of one
	// source IP in handlers at once (default half of Workers, at least 1),
	// so one host whose requests wait in their handlers (a gateway's route
	// lookups while the WAN is cut wait seconds each) cannot take every
	// worker while other hosts' requests queue behind it.
	MaxInFlightPerHost int
	// MaxBufferedBytes bounds the request bytes held across all
	// connections at once: frames being received and frames read but not
	// yet handled (default 128 MiB, at least MaxFrame). Per-connection
	// limits alone let 1024 connections hold a 16 MiB frame each. A frame
	// takes its declared length (already capped by MaxFrame) from the
	// budget before its body is read, all or nothing and in arrival order,
	// so frames arriving together never deadlock holding parts of it; its
	// buffer still grows only as bytes arrive. When the budget is spent,
	// connections stop being read until handlers finish (back-pressure
	// through TCP); a frame that waits longer than FrameTimeout closes its
	// connection. A peer that declares frames and sends nothing holds their
	// share for FrameTimeout at most. Frames of at most 4 KiB (every
	// NameServer request but broker registrations) are read first and then
	// take their bytes from a pool of their own, an eighth of
	// MaxBufferedBytes on top of it: frames that were only declared can
	// hold up registrations, but other hosts' reads and heartbeats never
	// wait for them.
	MaxBufferedBytes int64
	// MaxBufferedBytesPerHost is the share of MaxBufferedBytes the
	// connections of one source IP may hold (default a quarter of it, at
	// least MaxFrame), so one host that declares frames and trickles them
	// cannot hold the whole budget while other hosts wait.
	MaxBufferedBytesPerHost int64
	// MaxHeader caps a request's header (default 64 KiB; a NameServer's
	// requests have headers of a few hundred bytes). It is checked before
	// the rest of the frame is read.
	MaxHeader int
}

// Default limits.
const (
	DefaultMaxConns           = 1024
	DefaultMaxConnsPerHost    = 64
	DefaultIdleTimeout        = 120 * time.Second
	DefaultFrameTimeout       = 30 * time.Second
	DefaultWriteTimeout       = 10 * time.Second
	DefaultWorkers            = 64
	DefaultMaxInFlightPerConn = 16
	DefaultMaxBufferedBytes   = 128 << 20
	DefaultMaxHeader          = 64 << 10
)

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxConns, DefaultMaxConns)
	def(&l.MaxConnsPerHost, DefaultMaxConnsPerHost)
	def(&l.MaxFrame, DefaultMaxFrame)
	def(&l.Workers, DefaultWorkers)
	def(&l.MaxInFlightPerConn, DefaultMaxInFlightPerConn)
	def(&l.MaxInFlightPerHost, max(1, l.Workers/2))
	l.MaxInFlightPerHost = min(l.MaxInFlightPerHost, l.Workers)
	def(&l.MaxHeader, DefaultMaxHeader)
	if l.MaxBufferedBytes <= 0 {
		l.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	// One frame of the largest size must always fit, or it would wait
	// forever.
	l.MaxBufferedBytes = max(l.MaxBufferedBytes, int64(l.MaxFrame))
	if l.MaxBufferedBytesPerHost <= 0 {
		l.MaxBufferedBytesPerHost = l.MaxBufferedBytes / 4
	}
	l.MaxBufferedBytesPerHost = min(max(l.MaxBufferedBytesPerHost, int64(l.MaxFrame)), l.MaxBufferedBytes)
	defDur(&l.IdleTimeout, DefaultIdleTimeout)
	defDur(&l.FrameTimeout, DefaultFrameTimeout)
	defDur(&l.WriteTimeout, DefaultWriteTimeout)
	return l
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("remoting: server closed")

// Server serves remoting over TCP (or any net.Listener): one reader per
// connection, a bounded pool of handler goroutines, per-request panic
// recovery, and the Limits. Set the fields before the first Serve.
type Server struct {
	Handler Handler
	Limits  Limits
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	once      sync.Once
	lim       Limits
	workers   chan struct{}
	budget    *byteBudget
	small     *byteBudget // frames of at most smallFrame bytes, once read
	closing   atomic.Bool
	nextID    atomic.Uint64
	stats     serverCounters
	peerLog   *ratelog.Logger // what peers make the server log, rate-limited
	mu        sync.Mutex      // guards listeners, conns, perHost, hosts
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	perHost   map[string]int
	// hosts is each connected host's share of budget and workers; it goes
	// when the host's last connection has closed (and released what it
	// held).
	hosts  map[string]*hostShare
	connWG sync.WaitGroup
}

// hostShare is what the connections of one source IP may hold together.
type hostShare struct {
	budget  *byteBudget   // of Limits.MaxBufferedBytes: MaxBufferedBytesPerHost
	workers chan struct{} // of Limits.Workers: MaxInFlightPerHost
}

type serverCounters struct {
	accepted, rejected, badFrames, requests, panics, budgetWaits, writeFailures atomic.Uint64
}

// ServerStats counts what a Server has seen since it started.
type ServerStats struct {
	Conns     int    // open now
	Accepted  uint64 // connections accepted
	Rejected  uint64 // connections closed at once for a connection limit
	BadFrames uint64 // connections closed for a frame that did not decode or was too large
	Requests  uint64 // requests handed to the Handler
	Panics    uint64 // requests whose handler panicked
	// BufferedBytes is the request bytes held now (Limits.MaxBufferedBytes).
	BufferedBytes int64
	// BudgetWaits counts frames that had to wait for MaxBufferedBytes.
	BudgetWaits uint64
	// WriteFailures counts connections closed because a response could not
	// be written within WriteTimeout (a peer that does not read).
	WriteFailures uint64
}

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	s.init() // Stats may come before Serve has set the server up
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	return ServerStats{Conns: n, Accepted: s.stats.accepted.Load(), Rejected: s.stats.rejected.Load(),
		BadFrames: s.stats.badFrames.Load(), Requests: s.stats.requests.Load(), Panics: s.stats.panics.Load(),
		BufferedBytes: s.budget.inUse() + s.small.inUse(), BudgetWaits: s.stats.budgetWaits.Load(), WriteFailures: s.stats.writeFailures.Load()}
}

func (s *Server) init() {
	s.once.Do(func() {
		s.lim = s.Limits.withDefaults()
		s.workers = make(chan struct{}, s.lim.Workers)
		s.budget = newByteBudget(s.lim.MaxBufferedBytes)
		s.small = newByteBudget(max(s.lim.MaxBufferedBytes/8, smallFrame))
		s.listeners = map[net.Listener]struct{}{}
		s.conns = map[*conn]struct{}{}
		s.perHost = map[string]int{}
		s.hosts = map[string]*hostShare{}
		if s.Logger == nil {
			s.Logger = slog.Default()
		}
		s.peerLog = ratelog.New(s.Logger)
	})
}

// Serve accepts connections on l until Shutdown, and returns
// ErrServerClosed then, or the listener's error. It closes l.
func (s *Server) Serve(l net.Listener) error {
	s.init()
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		l.Close()
	}()
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			if acceptRetryable(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.Logger.Warn("remoting accept", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.accept(nc)
	}
}

// acceptRetryable reports whether an Accept error passes: a timeout, or
// the process or system out of file descriptors or buffers (a flood of
// connections, a low ulimit), which clears as connections close.
func acceptRetryable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

func hostOf(a net.Addr) string {
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

func (s *Server) accept(nc net.Conn) {
	host := hostOf(nc.RemoteAddr())
	s.mu.Lock()
	if s.closing.Load() || len(s.conns) >= s.lim.MaxConns || s.perHost[host] >= s.lim.MaxConnsPerHost {
		s.mu.Unlock()
		s.stats.rejected.Add(1)
		s.Logger.Debug("remoting connection refused by limit", "peer", nc.RemoteAddr())
		nc.Close()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	readCtx, stopRead := context.WithCancel(ctx)
	c := &conn{srv: s, nc: nc, host: host, cancel: cancel, readCtx: readCtx, stopRead: stopRead,
		inflight: make(chan struct{}, s.lim.MaxInFlightPerConn),
		info:     &ConnInfo{ID: s.nextID.Add(1), Remote: nc.RemoteAddr(), nc: nc}}
	c.ctx = context.WithValue(ctx, connKey{}, c.info)
	s.conns[c] = struct{}{}
	s.perHost[host]++
	if s.hosts[host] == nil {
		s.hosts[host] = &hostShare{budget: newByteBudget(s.lim.MaxBufferedBytesPerHost),
			workers: make(chan struct{}, s.lim.MaxInFlightPerHost)}
	}
	c.hostBudget = s.hosts[host].budget
	c.hostWorkers = s.hosts[host].workers
	s.connWG.Add(1)
	s.mu.Unlock()
	s.stats.accepted.Add(1)
	go c.serve()
}

// Shutdown stops accepting, stops reading new requests, lets the requests
// in handlers finish and their responses be written, then closes every
// connection. If ctx ends first it closes them at once and returns ctx's
// error. It waits for every connection goroutine either way.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	s.mu.Lock()
	s.closing.Store(true)
	for l := range s.listeners {
		l.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.stopReading()
	}
	done := make(chan struct{})
	go func() {
		s.connWG.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
			c.cancel()
		}
		s.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

// ConnInfo describes the connection a request arrived on.
type ConnInfo struct {
	ID     uint64 // unique within the Server
	Remote net.Addr

	nc     net.Conn
	mu     sync.Mutex
	closed bool
	hooks  []func()
}

// Close closes the connection now. Requests already read still run, but
// their responses are lost. A handler closes the connection when no answer
// is the right answer and the peer should fail over at once rather than time
// out: to a RocketMQ client a closed connection is a transport error, which
// keeps its cached route and moves it to its next NameServer.
func (ci *ConnInfo) Close() { ci.nc.Close() }

// OnClose registers f to run once the connection has closed and all its
// requests have been handled (RocketMQ unregisters a broker then). If it has
// already closed, f runs at once.
func (ci *ConnInfo) OnClose(f func()) {
	ci.mu.Lock()
	if ci.closed {
		ci.mu.Unlock()
		f()
		return
	}
	ci.hooks = append(ci.hooks, f)
	ci.mu.Unlock()
}

func (ci *ConnInfo) runClose(log *slog.Logger) {
	ci.mu.Lock()
	ci.closed = true
	hooks := ci.hooks
	ci.hooks = nil
	ci.mu.Unlock()
	for _, f := range hooks {
		func() {
			defer func() {
				if p := recover(); p != nil {
					log.Error("remoting close hook panicked", "panic", p, "stack", string(debug.Stack()))
				}
			}()
			f()
		}()
	}
}

type connKey struct{}

// ConnFromContext returns the connection of the request a Handler serves.
func ConnFromContext(ctx context.Context) (*ConnInfo, bool) {
	ci, ok := ctx.Value(connKey{}).(*ConnInfo)
	return ci, ok
}

type conn struct {
	srv      *Server
	nc       net.Conn
	host     string
	info     *ConnInfo
	ctx      context.Context
	cancel   context.CancelFunc
	inflight chan struct{}
	handlers sync.WaitGroup

	// hostBudget and hostWorkers are the connection's host's shares of
	// the budget and the workers.
	hostBudget  *byteBudget
	hostWorkers chan struct{}
	// readCtx ends when the connection stops reading; a frame waiting for
	// the server's byte budget gives up then.
	readCtx  context.Context
	stopRead context.CancelFunc

	readMu   sync.Mutex // guards stopping and the read deadline
	stopping bool
	writeMu  sync.Mutex // one response at a time
	// writeFailed is set, under writeMu, once a write failed.
	writeFailed bool
}

// stopReading makes the reader return at its next frame boundary or now.
func (c *conn) stopReading() {
	c.readMu.Lock()
	c.stopping = true
	c.nc.SetReadDeadline(time.Unix(1, 0))
	c.readMu.Unlock()
	c.stopRead()
}

// setReadDeadline sets the deadline unless the connection is stopping.
func (c *conn) setReadDeadline(d time.Duration) bool {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.stopping {
		return false
	}
	c.nc.SetReadDeadline(time.Now().Add(d))
	return true
}

func (c *conn) serve() {
	s := c.srv
	defer c.close()
	br := bufio.NewReaderSize(c.nc, 4<<10)
	for {
		if !c.setReadDeadline(s.lim.IdleTimeout) {
			return
		}
		// Wait for a frame's first byte under the idle timeout, then give
		// the frame itself the (shorter) frame timeout.
		if _, err := br.Peek(1); err != nil {
			return
		}
		if !c.setReadDeadline(s.lim.FrameTimeout) {
			return
		}
		req, held, err := c.readFrame(br)
		var wide *wideCodeError
		if errors.As(err, &wide) {
			// Answered here, as a NameServer answers an unknown code; the
			// frame was read whole and its bytes released.
			if resp := wide.response(); resp != nil {
				frame, _ := resp.Encode()
				c.write(frame)
			}
			continue
		}
		if err != nil {
			switch {
			case errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrMalformed):
				s.stats.badFrames.Add(1)
				s.peerLog.Info("remoting connection closed for a bad frame", "peer", c.nc.RemoteAddr(), "err", err)
			case errors.Is(err, errBudget) && c.readCtx.Err() == nil:
				s.peerLog.Warn("remoting connection closed: the server's request memory stayed spent",
					"peer", c.nc.RemoteAddr(), "err", err, "budget", s.lim.MaxBufferedBytes)
			}
			return
		}
		if req.IsResponse() {
			c.releaseBytes(held)
			continue // a server sends no requests, so no response is expected
		}
		select {
		case c.inflight <- struct{}{}:
		case <-c.ctx.Done():
			c.releaseBytes(held)
			return
		}
		// The host's share first, then the server's pool: a request
		// holding a worker never waits for anything else.
		select {
		case c.hostWorkers <- struct{}{}:
		case <-c.ctx.Done():
			<-c.inflight
			c.releaseBytes(held)
			return
		}
		select {
		case s.workers <- struct{}{}:
		case <-c.ctx.Done():
			<-c.hostWorkers
			<-c.inflight
			c.releaseBytes(held)
			return
		}
		c.handlers.Add(1)
		s.stats.requests.Add(1)
		go c.handle(req, held)
	}
}

// errBudget is returned by readFrame when a frame could not get its bytes
// from the server's budget before its frame timeout.
var errBudget = errors.New("request memory budget spent")

// readFrame reads one frame and returns how many bytes of the server's
// budget it holds: the caller releases them once the request is handled.
// The frame takes its declared length from the budget before its bytes are
// read (all or nothing, in arrival order, so frames arriving together can
// never each hold part of the budget while waiting for the rest), while the
// buffer itself grows only as bytes arrive. When the budget is spent the
// read waits, unread bytes pile up in TCP and the peer slows down; a wait
// that outlasts the frame timeout closes the connection.
func (c *conn) readFrame(br *bufio.Reader) (*Command, int64, error) {
	s := c.srv
	length, err := readFrameLength(br, s.lim.MaxFrame)
	if err != nil {
		return nil, 0, err
	}
	// The header's length is known from the next 4 bytes: refuse a header
	// too large to be a NameServer request before reading (and decoding)
	// it. Peek leaves the bytes for the frame's read below.
	hl, err := br.Peek(4)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, 0, err
	}
	if n := int(binary.BigEndian.Uint32(hl) & 0xFFFFFF); n > s.lim.MaxHeader {
		return nil, 0, fmt.Errorf("%w: header of %d bytes, cap %d", ErrFrameTooLarge, n, s.lim.MaxHeader)
	}
	held := int64(length)
	pool := s.poolFor(held)
	var frame []byte
	if pool == s.small {
		// A small frame (every client request and heartbeat) is read
		// before it takes its bytes: it needs no more memory than the
		// connection's read buffer, and what it then takes is bytes that
		// arrived, from a pool of its own, so frames that were only
		// declared never hold it up.
		if frame, err = readGrowing(br, length); err != nil {
			return nil, 0, err
		}
	}
	// The host's share first, then the server's: a frame holding the
	// server's budget never waits for anything but its own bytes, so the
	// two never wait on each other in a cycle.
	waitedHost, err := c.hostBudget.acquire(c.readCtx, s.lim.FrameTimeout, held, &s.stats.budgetWaits)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: waited for %d bytes of this host's share: %v", errBudget, held, err)
	}
	waited, err := pool.acquire(c.readCtx, s.lim.FrameTimeout, held, &s.stats.budgetWaits)
	if err != nil {
		c.hostBudget.release(held)
		return nil, 0, fmt.Errorf("%w: waited for %d bytes: %v", errBudget, held, err)
	}
	// A frame that waited for the budget gets its full frame timeout from
	// now: the wait was the server's, not the peer's.
	if (waited || waitedHost) && !c.setReadDeadline(s.lim.FrameTimeout) {
		c.releaseBytes(held)
		return nil, 0, fmt.Errorf("%w: the connection is stopping", errBudget)
	}
	if frame == nil {
		frame, err = readGrowing(br, length)
	}
	if err == nil {
		var req *Command
		if req, err = decodeFrame(frame); err == nil {
			return req, held, nil
		}
	}
	c.releaseBytes(held)
	return nil, 0, err
}

// releaseBytes gives back what a frame took from the budgets.
func (c *conn) releaseBytes(held int64) {
	c.srv.poolFor(held).release(held)
	c.hostBudget.release(held)
}

// smallFrame is the largest frame read in full before it takes its bytes
// from a budget, from the pool of small frames: as much as a connection's
// read buffer holds. NameServer requests other than broker registrations
// are a few hundred bytes.
const smallFrame = 4 << 10

// poolFor returns the budget a frame of n bytes takes them from.
func (s *Server) poolFor(n int64) *byteBudget {
	if n <= smallFrame {
		return s.small
	}
	return s.budget
}

func (c *conn) handle(req *Command, held int64) {
	defer func() {
		<-c.inflight
		c.handlers.Done()
	}()
	resp := c.call(req)
	// The request's bytes are the handler's until it returns.
	c.releaseBytes(held)
	// The worker is free once the handler is done: a peer that does not
	// read its responses holds only its own in-flight slots while the write
	// waits, never the workers other connections need.
	<-c.srv.workers
	<-c.hostWorkers
	if resp == nil || req.IsOneway() {
		return
	}
	resp.Opaque = req.Opaque
	resp.Flag |= FlagResponse
	frame, err := resp.Encode()
	if err != nil {
		c.srv.Logger.Error("remoting response does not encode", "code", req.Code, "err", err)
		frame, _ = NewResponse(req, SystemError, "response does not encode").Encode()
	}
	c.write(frame)
}

// write writes one response frame, closing the connection when it cannot
// be written within the write timeout.
func (c *conn) write(frame []byte) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(c.srv.lim.WriteTimeout))
	if c.writeFailed {
		return // the connection is closing; its peer has lost the stream already
	}
	if _, err := c.nc.Write(frame); err != nil {
		// The reader then returns; the peer has lost the stream.
		c.writeFailed = true
		c.nc.Close()
		if c.ctx.Err() == nil {
			c.srv.stats.writeFailures.Add(1)
			c.srv.peerLog.Info("remoting connection closed: a response could not be written (is the peer reading?)",
				"peer", c.nc.RemoteAddr(), "err", err, "write_timeout", c.srv.lim.WriteTimeout)
		}
	}
}

// call runs the handler, turning a panic into SYSTEM_ERROR.
func (c *conn) call(req *Command) (resp *Command) {
	defer func() {
		if p := recover(); p != nil {
			c.srv.stats.panics.Add(1)
			c.srv.Logger.Error("remoting handler panicked", "code", req.Code, "peer", c.nc.RemoteAddr(),
				"panic", p, "stack", string(debug.Stack()))
			resp = NewResponse(req, SystemError, fmt.Sprintf("internal error handling request code %d", req.Code))
		}
	}()
	return c.srv.Handler.ServeRemoting(c.ctx, c.nc.RemoteAddr(), req)
}

func (c *conn) close() {
	c.readMu.Lock()
	stopping := c.stopping
	c.readMu.Unlock()
	if !stopping {
		c.cancel() // the peer went away: nobody reads what handlers still write
	}
	c.handlers.Wait()
	c.nc.Close()
	c.cancel()
	s := c.srv
	// Close hooks run before the server forgets the connection, so Stats
	// and Shutdown see a connection until what its close does is done.
	c.info.runClose(s.Logger)
	s.mu.Lock()
	delete(s.conns, c)
	if s.perHost[c.host]--; s.perHost[c.host] <= 0 {
		delete(s.perHost, c.host)
		delete(s.hosts, c.host)
	}
	s.mu.Unlock()
	s.connWG.Done()
}

// byteBudget is the bytes a Server's connections may hold of request frames
// at once (Limits.MaxBufferedBytes): a FIFO weighted semaphore, so a large
// frame is not starved by a stream of small ones, and a count to report.
type byteBudget struct {
	sem  *semaphore.Weighted
	used atomic.Int64
}

func newByteBudget(limit int64) *byteBudget {
	return &byteBudget{sem: semaphore.NewWeighted(limit)}
}

// acquire takes n bytes, waiting up to timeout or until ctx ends; waited
// says whether it had to wait, waits counts the calls that did.
func (b *byteBudget) acquire(ctx context.Context, timeout time.Duration, n int64, waits *atomic.Uint64) (waited bool, err error) {
	if !b.sem.TryAcquire(n) {
		waited = true
		waits.Add(1)
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := b.sem.Acquire(ctx, n); err != nil {
			return true, err
		}
	}
	b.used.Add(n)
	return waited, nil
}

func (b *byteBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.used.Add(-n)
	b.sem.Release(n)
}

func (b *byteBudget) inUse() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}
