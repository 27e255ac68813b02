// Package client is the Go side of the edgereg protocol: one QUIC connection
// to one node, with a typed method for every request. Brokers, route
// clients, the CLI and the benchmarks all use it.
//
// Requests go over a long-lived pipelined stream by default (a Pipe), so a
// request costs one frame each way and no stream set-up; CallOnce sends a
// request on a stream of its own, as the protocol's one-shot form.
//
// A caller sending many requests in a row gets the cheapest path from a
// Stream: it keeps its request and response buffers between calls, builds
// each request frame in one buffer (get-routes bodies without reflection),
// and watches call deadlines with one timer of its own. Decoding an answer
// into the same *wire.Routes every call reuses its arrays and repeated
// names (see wire.Frame.DecodeRoutes).
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
)

// Defaults.
const (
	DefaultDialTimeout   = 5 * time.Second
	DefaultKeepAlive     = 15 * time.Second
	DefaultIdleTimeout   = 60 * time.Second
	DefaultRequestWindow = 10 * time.Second
)

// ErrClosed is returned by calls on a closed Conn or Pipe.
var ErrClosed = errors.New("edgereg client: connection closed")

// Config configures a connection. TLS is required: build it with
// pki.ClientConfig so the node's certificate is verified.
type Config struct {
	TLS *tls.Config
	// QUIC overrides the QUIC settings; by default keep-alives every 15 s
	// hold NAT bindings and a connection idle for 60 s is closed.
	QUIC *quic.Config
	// MaxResponseLen caps a response frame; default wire.DefaultMaxResponseLen.
	MaxResponseLen int
	// RequestTimeout bounds a call whose context has no deadline; default 10 s.
	RequestTimeout time.Duration
	// Transport, when set, is the QUIC transport (and so the UDP socket) to
	// dial from; connections then share it. By default each connection
	// binds a socket of its own. Tests use it to dial over a simulated
	// network.
	Transport *quic.Transport
}

// Conn is a connection to one node. It is safe for concurrent use.
type Conn struct {
	qc   *quic.Conn
	addr string
	cfg  Config

	mu   sync.Mutex
	pipe *Pipe
}

// Dial connects to the node at addr (host:port). ctx bounds the dial
// (DefaultDialTimeout when it has no deadline), even while the node says
// nothing: a node busy with a reconnect storm queues handshakes silently.
func Dial(ctx context.Context, addr string, cfg Config) (*Conn, error) {
	if cfg.TLS == nil {
		return nil, errors.New("edgereg client: no TLS config")
	}
	if cfg.MaxResponseLen <= 0 {
		cfg.MaxResponseLen = wire.DefaultMaxResponseLen
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestWindow
	}
	qcfg := cfg.QUIC
	if qcfg == nil {
		qcfg = &quic.Config{KeepAlivePeriod: DefaultKeepAlive, MaxIdleTimeout: DefaultIdleTimeout}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultDialTimeout)
		defer cancel()
	}
	qcfg = patientHandshake(ctx, qcfg)
	qc, err := dial(ctx, addr, cfg, qcfg)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return &Conn{qc: qc, addr: addr, cfg: cfg}, nil
}

// patientHandshake makes ctx's deadline the handshake's limit: quic-go
// otherwise gives a handshake up after 5 s without a packet from the node
// (HandshakeIdleTimeout), however long ctx allows, while a node busy with
// a reconnect storm keeps handshakes waiting their turn without a word.
// An explicit HandshakeIdleTimeout is kept.
func patientHandshake(ctx context.Context, qcfg *quic.Config) *quic.Config {
	deadline, ok := ctx.Deadline()
	if !ok || qcfg.HandshakeIdleTimeout != 0 {
		return qcfg
	}
	if d := time.Until(deadline); d > DefaultDialTimeout {
		qcfg = qcfg.Clone()
		qcfg.HandshakeIdleTimeout = d
	}
	return qcfg
}

func dial(ctx context.Context, addr string, cfg Config, qcfg *quic.Config) (*quic.Conn, error) {
	if cfg.Transport == nil {
		return quic.DialAddr(ctx, addr, cfg.TLS, qcfg)
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	return cfg.Transport.Dial(ctx, ua, cfg.TLS, qcfg)
}

// Addr returns the address the connection was dialled with.
func (c *Conn) Addr() string { return c.addr }

// Done is closed when the connection is gone.
func (c *Conn) Done() <-chan struct{} { return c.qc.Context().Done() }

// Stats returns the connection's QUIC statistics (RTT, loss).
func (c *Conn) Stats() quic.ConnectionStats { return c.qc.ConnectionStats() }

// Resumed reports whether the TLS session was resumed from an earlier
// connection made with the same TLS config, skipping certificate checks.
func (c *Conn) Resumed() bool { return c.qc.ConnectionState().TLS.DidResume }

// Close closes the connection and every stream on it.
func (c *Conn) Close() error {
	return c.qc.CloseWithError(0, "client closed")
}

// Call sends a request on the connection's shared pipe and decodes the
// response body into resp (which may be nil). A node error is a *wire.Error.
func (c *Conn) Call(ctx context.Context, t wire.Type, req, resp any) error {
	p, err := c.sharedPipe(ctx)
	if err != nil {
		return err
	}
	err = p.Call(ctx, t, req, resp)
	if errors.Is(err, ErrClosed) || isStreamError(err) {
		c.dropPipe(p)
	}
	return err
}

func (c *Conn) sharedPipe(ctx context.Context) (*Pipe, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pipe != nil && !c.pipe.closed() {
		return c.pipe, nil
	}
	p, err := c.OpenPipe(ctx)
	if err != nil {
		return nil, err
	}
	c.pipe = p
	return p, nil
}

func (c *Conn) dropPipe(p *Pipe) {
	c.mu.Lock()
	if c.pipe == p {
		c.pipe = nil
	}
	c.mu.Unlock()
	p.Close()
}

// CallOnce sends a request on a stream of its own: request, FIN, response,
// FIN.
//
// As Stream.Call, it derives no context: a timer kept with its pooled
// buffers ends the stream at the deadline, and only a context that can be
// cancelled gets a hook for it.
func (c *Conn) CallOnce(ctx context.Context, t wire.Type, req, resp any) error {
	bufs := getCallBuffers() // the request and response bytes, reused across calls
	defer putCallBuffers(bufs)
	var err error
	if bufs.out, err = wire.AppendRequest(bufs.out, t, 1, req); err != nil {
		return err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.cfg.RequestTimeout)
	}
	s, err := c.qc.OpenStream()
	if err != nil {
		// At the peer's stream limit: wait for a stream, within the call's time.
		octx, cancel := context.WithDeadline(ctx, deadline)
		s, err = c.qc.OpenStreamSync(octx)
		cancel()
		if err != nil {
			return fmt.Errorf("%s to %s: open stream: %w", t, c.addr, err)
		}
	}
	bufs.watchStream(s, deadline)
	defer bufs.unwatch()
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() {
			s.CancelRead(0)
			s.CancelWrite(0)
		})
		defer stop()
	}
	if _, err := s.Write(bufs.out); err != nil {
		return fmt.Errorf("%s to %s: %w", t, c.addr, callErr(ctx, err))
	}
	s.Close()
	b, err := bufs.in.next(s, c.cfg.MaxResponseLen)
	routes, _ := resp.(*wire.Routes)
	decoded := false // the frame and its routes, in one walk of the body
	if err == nil {
		if decoded = routes != nil && wire.DecodeRoutesFrame(b, 1, &bufs.rf, routes, &bufs.checks); !decoded {
			err = wire.DecodeFrame(b, &bufs.rf)
		}
	}
	if err != nil {
		s.CancelRead(0)
		return fmt.Errorf("%s to %s: %w", t, c.addr, callErr(ctx, err))
	}
	// Read the node's FIN, which comes with the response (usually in the
	// Read that brought it), so the stream is complete on both sides and
	// QUIC releases it; anything else after the response is not ours to
	// wait for.
	switch {
	case bufs.in.ended():
	case bufs.in.pending():
		s.CancelRead(0)
	default:
		var one [1]byte
		if _, err := s.Read(one[:]); err != io.EOF {
			s.CancelRead(0)
		}
	}
	if decoded {
		return nil
	}
	return decodeResponse(&bufs.rf, resp)
}

func (c *Conn) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.RequestTimeout)
}

// decodeResponse turns a response frame into resp or its *wire.Error.
func decodeResponse(f *wire.Frame, resp any) error {
	if f.Error != nil {
		return f.Error
	}
	if resp == nil {
		return nil
	}
	var err error
	if r, ok := resp.(*wire.Routes); ok {
		err = f.DecodeRoutes(r) // polls of held routes, without reflection
	} else {
		err = f.DecodeBody(resp)
	}
	if err != nil {
		return fmt.Errorf("decode %s response: %w", f.Type, err)
	}
	return nil
}

// ctxErr prefers the context's error when the context ended, since a
// cancelled stream reports only "stream canceled".
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// callErr is ctxErr for a call whose deadline is on its stream: the
// stream's deadline passing reads as the context deadline it stands for.
func callErr(ctx context.Context, err error) error {
	err = ctxErr(ctx, err)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

func isStreamError(err error) bool {
	var se *quic.StreamError
	var ae *quic.ApplicationError
	var ie *quic.IdleTimeoutError
	return errors.As(err, &se) || errors.As(err, &ae) || errors.As(err, &ie)
}
