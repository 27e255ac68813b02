package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/sync/semaphore"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// QUIC application error codes a node closes connections and streams with.
const (
	codeShutdown      quic.ApplicationErrorCode = 0x10
	codeNoIdentity    quic.ApplicationErrorCode = 0x11
	codeStreamTimeout quic.StreamErrorCode      = 0x20
	codeStreamAbort   quic.StreamErrorCode      = 0x21
)

// peer is who is on the other end of a connection.
type peer struct {
	pki.Identity
	anonymous bool
	remote    string // host:port
	ip        string // the host alone, for route policies
}

func (p peer) role() string {
	if p.anonymous {
		return "anonymous"
	}
	return string(p.Role)
}

// connState is what a node keeps per connection.
type connState struct {
	ctx        context.Context // ends with the connection
	peer       peer
	frameLimit int
	adm        *admitted // the connection's admission slot (admission.go)
	watchMu    sync.Mutex
	watches    int // topics watched over all streams of the connection
	// remembered counts the topics its streams remember having pushed
	// but no longer watch (watcher.idle), bounded by the watch cap.
	remembered int
	// The budgets its class shares, each with its source IP's share for
	// readers (not for brokers and operators: a gateway's 1,000 brokers
	// share one IP): of bytes in flight (readFrame), of bytes of large
	// answers (writeAnswer), of watched topics (--max-watches).
	budget, answers, watchBudget sharedBudget
	// lists is a token a stream holds while the connection's one list
	// answer (topics, cluster-info) is made and written (listTurn).
	lists chan struct{}
}

// testHookServeConn, when set, runs as a connection's service starts, before
// the node records it; tests use it to land in Shutdown's windows.
var testHookServeConn func()

func (n *Node) serveConn(qc *quic.Conn) {
	if testHookServeConn != nil {
		testHookServeConn()
	}
	n.conns.Store(qc, struct{}{})
	defer n.conns.Delete(qc)
	if n.closing.Load() {
		// Shutdown may have swept the connections before this one was
		// stored; it sets closing before sweeping, so this sees it.
		qc.CloseWithError(codeShutdown, "node shutting down")
		return
	}
	n.stats.conns.Add(1)
	defer n.stats.conns.Add(-1)
	p, err := n.identify(qc)
	if err != nil {
		n.adm.settle(qc)
		n.stats.refused.WithLabelValues(refusedNoIdentity).Inc()
		n.warn.refused.Warn("connection refused", "reason", refusedNoIdentity, "remote", qc.RemoteAddr().String(), "err", err)
		qc.CloseWithError(codeNoIdentity, err.Error())
		return
	}
	adm, ok := n.adm.establish(qc, &p)
	if !ok {
		qc.CloseWithError(codeTooManyConns, "connection limit reached: retry later or use another node")
		return
	}
	ct := n.trustOf(qc, p)
	n.conns.Store(qc, ct) // for the trust loop (auth.go)
	if !n.checkTaken(qc, ct) {
		return
	}
	cs := &connState{ctx: qc.Context(), peer: p, frameLimit: n.cfg.MaxRequestLen, adm: adm, lists: make(chan struct{}, 1)}
	cs.watchBudget.all = n.watchBudget
	if classOf(p) == brokerClass {
		cs.frameLimit = n.cfg.MaxBrokerFrameLen
		cs.budget.all, cs.answers.all = n.brokerInFlight, n.brokerAnswers
	} else {
		cs.budget = sharedBudget{all: n.inFlight, host: n.requestShares.take(p.ip)}
		cs.answers = sharedBudget{all: n.answers, host: n.answerShares.take(p.ip)}
		cs.watchBudget.host = n.watchShares.take(p.ip)
		defer n.requestShares.give(p.ip)
		defer n.answerShares.give(p.ip)
		defer n.watchShares.give(p.ip)
	}
	ctx := qc.Context()
	for {
		s, err := qc.AcceptStream(ctx)
		if err != nil {
			return
		}
		if !n.servers.handOff(cs, s) {
			n.wg.Add(1) // this goroutine is counted: Shutdown cannot be past its Wait
			go n.streamServer(cs, s)
		}
	}
}

// Stream servers. A stream is served by a goroutine of its own, but that
// goroutine is reused: once its stream ends it waits a while for the next
// stream of any connection (as fasthttp's worker pool does) before it
// exits. A fresh goroutine per stream starts on a small stack and grows it
// (runtime.newstack, copystack) inside every request's decode: with a
// stream per request, 17 % of the node's CPU. A reused one keeps the stack
// it grew.
const (
	// streamServerIdle is how long an idle stream server waits for the
	// next stream before it exits.
	streamServerIdle = 2 * time.Second
	// maxIdleStreamServers bounds the idle stream servers, hence the
	// memory they keep (a goroutine and its grown stack, a few KiB each).
	maxIdleStreamServers = 256
)

// streamServers hands accepted streams to idle stream servers.
type streamServers struct {
	jobs     chan streamJob // unbuffered: a send succeeds only into a waiting server
	idle     atomic.Int32   // servers waiting on jobs
	reused   atomic.Uint64  // streams served by a reused server, for tests
	idleWait atomic.Int64   // streamServerIdle; tests lengthen it
}

type streamJob struct {
	cs *connState
	s  *quic.Stream
}

func newStreamServers() *streamServers {
	p := &streamServers{jobs: make(chan streamJob)}
	p.idleWait.Store(int64(streamServerIdle))
	return p
}

// handOff gives s to an idle server; false when none is waiting.
func (p *streamServers) handOff(cs *connState, s *quic.Stream) bool {
	select {
	case p.jobs <- streamJob{cs, s}:
		p.reused.Add(1)
		return true
	default:
		return false
	}
}

// streamServer serves s, then each stream handed to it, until it has
// waited streamServerIdle for one in vain, the idle servers are enough, or
// the node stops. It is one of the goroutines Shutdown waits for (n.wg).
func (n *Node) streamServer(cs *connState, s *quic.Stream) {
	defer n.wg.Done()
	p := n.servers
	var idle *time.Timer
	wd := newReadWatchdog()
	defer wd.stop()
	var kept streamScratch // what one stream leaves the next (serveStream)
	for {
		n.serveStream(cs, s, wd, &kept)
		cs, s = nil, nil // hold nothing of the last stream while idle
		if p.idle.Add(1) > maxIdleStreamServers {
			p.idle.Add(-1)
			return
		}
		wait := time.Duration(p.idleWait.Load())
		if idle == nil {
			idle = time.NewTimer(wait)
		} else {
			idle.Reset(wait) // Go 1.23 timers: no stale tick after Reset
		}
		select {
		case j := <-p.jobs:
			p.idle.Add(-1)
			cs, s = j.cs, j.s
		case <-idle.C:
			p.idle.Add(-1)
			return
		case <-n.stop:
			p.idle.Add(-1)
			idle.Stop()
			return
		}
	}
}

func (n *Node) identify(qc *quic.Conn) (peer, error) {
	p := peer{remote: qc.RemoteAddr().String()}
	p.ip = hostOf(p.remote)
	id, err := pki.IdentityFromConnState(qc.ConnectionState().TLS)
	switch {
	case err == nil:
		p.Identity = id
		return p, nil
	case errors.Is(err, pki.ErrNoPeerCert) && n.cfg.AllowAnonymousClients:
		p.anonymous = true
		return p, nil
	}
	return p, fmt.Errorf("no usable identity in client certificate: %w", err)
}

// streamWriter serializes frames written to one stream by its request loop
// and its watch pusher.
type streamWriter struct {
	s       *quic.Stream
	mu      sync.Mutex
	timeout time.Duration // the write timeout
	// onTimeout runs once when a write times out, after the stream is
	// reset.
	onTimeout func()
	failed    error
	// answers is the budget a large answer takes before it is written
	// (writeAnswer); none when its all is nil.
	answers sharedBudget
	// buf is reused to encode each frame (quic-go holds no reference to
	// what Write was given once it returns); one that grew past
	// maxKeptWriteBuf for a large response is let go.
	buf []byte
	// spare is the stream's last get-routes answer, emptied, for its
	// next read (node/encode.go). Only the request loop uses it.
	spare *routeSet
	// query is the get-routes request being answered, decoded into the
	// writer's memory rather than a new GetRoutes per request (dispatch).
	// Only the request loop uses it.
	query wire.GetRoutes
}

// streamScratch is what a stream server keeps from one stream for the
// next: the last stream's writer (its encode buffer and the emptied
// get-routes answer it ended with), the frame and answer its request loop
// decodes into and builds, and the buffer of its last get-routes request.
// With a stream per request, each stream would otherwise allocate all of
// them for its one request.
type streamScratch struct {
	w    *streamWriter // nil when the last stream's writer is not free
	f    wire.Frame
	a    answer
	body []byte      // a request body's buffer, free for the next frame
	rd   frameBuffer // the stream's bytes read ahead of the frame being read
}

// writer returns a writer for s: the last stream's, reset, or a new one.
// A reused writer keeps its onTimeout: the stream server's node is the same.
func (k *streamScratch) writer(s *quic.Stream, timeout time.Duration) *streamWriter {
	w := k.w
	k.w = nil
	if w == nil {
		w = new(streamWriter)
	}
	w.s, w.timeout, w.failed = s, timeout, nil
	return w
}

// takeFrom keeps w for the next stream. Only a stream that never watched
// gives its writer up: a watch stream's writer is shared with its
// connection's pusher (watch.go), which may still hold it.
func (k *streamScratch) takeFrom(w *streamWriter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cap(w.buf) > maxKeptWriteBuf {
		w.buf = nil
	}
	w.buf = w.buf[:0]
	w.s, w.failed = nil, nil
	if cap(w.query.Topics) > maxKeptQueryTopics {
		w.query = wire.GetRoutes{}
	}
	k.w = w
}

// keepBody keeps a request's body buffer for the next frame, once nothing
// refers to it any more. Only a get-routes request's is kept: its decode
// copies what it keeps (the topic names), where other requests' decoded
// messages may share the body's bytes.
func (k *streamScratch) keepBody(t wire.Type, body []byte) {
	if t == wire.TypeGetRoutes && cap(body) <= maxKeptReadBuf {
		k.body = body[:0]
	}
}

// maxKeptQueryTopics bounds the topics array of a get-routes query a
// stream server keeps for its next stream.
const maxKeptQueryTopics = 128

// maxKeptReadBuf bounds the request buffer a stream server keeps.
const maxKeptReadBuf = 4 << 10

// maxKeptWriteBuf bounds the encode buffer a stream keeps between frames.
const maxKeptWriteBuf = 16 << 10

// writeAnswer writes a's frame, encoded straight into the buffer in one
// pass (node/encode.go). An answer larger than maxKeptWriteBuf is written
// within the stream class's budget of answer bytes (writeBudgeted).
func (w *streamWriter) writeAnswer(a *answer) error {
	if a.routes != nil && a.Error == nil && w.answers.all != nil {
		// A get-routes answer's size is known before it is encoded: take
		// the budget first, so that streams waiting for it hold no
		// encoding at all.
		if bound := routesAnswerBound(a.routes); bound > maxKeptWriteBuf {
			return w.writeBudgeted(a, nil, int64(bound))
		}
	}
	w.mu.Lock()
	buf, err := appendAnswer(w.buf[:0], a)
	if err != nil {
		w.mu.Unlock()
		if errors.Is(err, wire.ErrFrameTooLarge) {
			return w.write(tooLarge(a, err))
		}
		return err
	}
	if len(buf) > maxKeptWriteBuf && w.answers.all != nil {
		// buf is not w.buf's memory: that is never larger.
		w.mu.Unlock()
		return w.writeBudgeted(a, buf, int64(len(buf)))
	}
	if cap(buf) <= maxKeptWriteBuf {
		w.buf = buf[:0]
	}
	err = w.writeLocked(buf)
	w.mu.Unlock()
	return err
}

// writeBudgeted writes a's large answer, holding size bytes of the answer
// budget (all of it for an answer wider than the budget) until the stream
// has taken it; buf is the answer encoded, or nil when it is yet to be. A
// large request's answer can be a hundred times its size (a get-routes
// naming one topic 10,000 times), and a peer that reads nothing holds each
// for the write timeout: without the budget every stream of every
// connection could hold one. When the budget is spent an encoding is
// dropped while the stream waits its turn, at most the write timeout
// (then the stream is reset as a write that timed out), and a is encoded
// once it has the budget: the same bytes.
func (w *streamWriter) writeBudgeted(a *answer, buf []byte, size int64) error {
	k := min(size, w.answers.size())
	if !w.answers.tryAcquire(k) {
		buf = nil
		if err := w.answers.acquire(w.s.Context(), k, time.Now().Add(w.timeout)); err != nil {
			w.mu.Lock()
			defer w.mu.Unlock()
			switch {
			case w.failed != nil:
			case w.s.Context().Err() != nil: // the stream or its connection closed
				w.failLocked(context.Cause(w.s.Context()))
			default:
				w.timedOutLocked(os.ErrDeadlineExceeded)
			}
			return w.failed
		}
	}
	defer w.answers.release(k)
	w.mu.Lock()
	defer w.mu.Unlock()
	if buf == nil {
		var err error
		if buf, err = appendAnswer(nil, a); errors.Is(err, wire.ErrFrameTooLarge) {
			buf, err = wire.AppendFrame(nil, tooLarge(a, err))
		}
		if err != nil {
			return err
		}
	}
	return w.writeLocked(buf)
}

// tooLarge is the answer to a request whose answer would be a frame over
// wire.MaxFrameLen (err says how large): code 2 with the request's type
// and id, where ending the stream without an answer would leave the
// client to retry the same request.
func tooLarge(a *answer, err error) *wire.Frame {
	msg := err.Error()
	var e *wire.FrameTooLargeError
	if errors.As(err, &e) {
		msg = fmt.Sprintf("answer of %d bytes exceeds the frame limit %d", e.Len, e.Limit)
	}
	return errorFrame(a.Type, a.ID, wire.Errorf(wire.CodeFrameTooLarge, "%s: ask for fewer topics at once", msg))
}

func (w *streamWriter) write(f *wire.Frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	buf, err := wire.AppendFrame(w.buf[:0], f)
	if err != nil {
		return err
	}
	if cap(buf) <= maxKeptWriteBuf {
		w.buf = buf[:0]
	}
	return w.writeLocked(buf)
}

// writeRaw writes an encoded frame, length prefix included. A peer that
// does not take it within the write timeout has stopped reading: the
// stream is reset in both directions with code 0x20 (PROTOCOL.md §4.3), so
// the peer learns that the requests not answered were dropped, where a FIN
// would have hidden it. After a failed write every later one fails too.
func (w *streamWriter) writeRaw(buf []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(buf)
}

// writeLocked is writeRaw with w.mu held.
func (w *streamWriter) writeLocked(buf []byte) error {
	if w.failed != nil {
		return w.failed
	}
	w.s.SetWriteDeadline(time.Now().Add(w.timeout))
	_, err := w.s.Write(buf)
	if err != nil {
		w.failLocked(err)
	}
	return err
}

// failLocked ends a stream that could not be written: every later write
// fails with err, and the node stops reading it too (STOP_SENDING 0x21),
// so that the peer learns its later requests are dropped and the stream
// ends, with its request loop and any watch on it, rather than be read on
// with nothing ever written to it (a watcher that sent STOP_SENDING kept
// its watch, and its share of the watch budgets). A write that timed out
// ends it both ways (timedOutLocked).
func (w *streamWriter) failLocked(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		w.timedOutLocked(err)
		return
	}
	w.failed = err
	w.s.CancelRead(codeStreamAbort)
}

// routesAnswerBound is at least the size of the frame, length prefix
// included, that appendAnswer encodes for a get-routes answer r: every
// item's head counted at its widest.
func routesAnswerBound(r *wire.Routes) int {
	n := 128 + len(r.Node.NodeID) // frame, Routes and NodeState heads and integers
	for i := range r.Results {
		n += len(r.Results[i].Topic) + len(r.Results[i].Route) + 25
	}
	for i := range r.Groups {
		n += len(r.Groups[i].BrokerName) + 31
	}
	return n
}

// timedOutLocked ends a stream whose write could not be made within the
// write timeout: reset both ways with 0x20, and every later write fails
// with err.
func (w *streamWriter) timedOutLocked(err error) {
	w.failed = err
	w.s.CancelWrite(codeStreamTimeout)
	w.s.CancelRead(codeStreamTimeout)
	if w.onTimeout != nil {
		w.onTimeout()
	}
}

// serveStream answers the frames of one stream in order until the peer
// finishes it, breaks the protocol, or goes quiet for too long.
func (n *Node) serveStream(cs *connState, s *quic.Stream, wd *readWatchdog, kept *streamScratch) {
	n.stats.streams.Add(1)
	defer n.stats.streams.Add(-1)
	wd.watch(s)
	defer wd.release()
	kept.rd.reset(s)
	defer kept.rd.reset(nil)
	w := kept.writer(s, n.cfg.WriteTimeout)
	w.answers = cs.answers
	if w.onTimeout == nil {
		w.onTimeout = n.stats.timeouts.Inc // a method value: allocated once per writer
	}
	var watch *watcher
	defer func() {
		if watch == nil {
			kept.takeFrom(w)
		} else {
			watch.close()
		}
		s.Close()
	}()
	// The frame and the answer are the stream server's, reused for each
	// request: both escape to the heap (through the decoder and the
	// encoder), and nothing keeps either past its request.
	f, a := &kept.f, &kept.a
	for first := true; ; first = false {
		idle := n.cfg.IdleTimeout
		if first {
			idle = n.cfg.ReadTimeout // a new stream must say something soon
		}
		buf, err := n.readFrame(cs, &kept.rd, wd, idle, cs.frameLimit, kept.body)
		if err != nil {
			n.endStream(w, err) // kept.body is still free: nothing holds it
			return
		}
		kept.body = nil // buf may be it: the frame's until keepBody
		*f = wire.Frame{}
		if err := wire.DecodeFrame(buf, f); err != nil {
			// The length prefix kept the stream in step: answer and go on.
			n.stats.badFrames.Inc()
			if w.write(errorFrame(0, 0, wire.Errorf(wire.CodeBadRequest, "%v", err))) != nil {
				s.CancelRead(codeStreamAbort) // no answer can reach the peer: stop its requests
				return
			}
			continue
		}
		listed := isListQuery(f.Type)
		if listed && !cs.listTurn(n.cfg.WriteTimeout) {
			listed = false
			*a = errorAnswer(f.Type, f.ID, wire.Errorf(wire.CodeOverloaded,
				"another topics or cluster-info answer of this connection is still being written: read it, or retry later"))
		} else {
			*a = n.handle(cs, f, w, &watch)
		}
		err = w.writeAnswer(a)
		if listed {
			<-cs.lists
		}
		if err != nil {
			// The peer stopped reading (STOP_SENDING), or the write timed
			// out: the writer stopped reading the stream then (failLocked).
			// An answer that could not be encoded ends it here the same
			// way, so that the peer learns its later requests were dropped
			// and the stream ends rather than fill the node's buffers unread.
			s.CancelRead(codeStreamAbort)
			return
		}
		w.keepRouteSet(a.set)
		kept.keepBody(f.Type, buf)
		// Keep neither the request's bytes nor the answer while the
		// stream waits for its next frame, maybe for minutes.
		*f, *a = wire.Frame{}, answer{}
	}
}

// isListQuery reports whether t is answered with a list of the whole
// registry (every topic, every group) from a request of a few bytes.
func isListQuery(t wire.Type) bool { return t == wire.TypeTopics || t == wire.TypeClusterInfo }

// listTurn waits, at most wait, until no other stream of the connection
// is making or writing a list answer (isListQuery), and takes the turn;
// the caller gives it back once its answer is written. A peer that asks
// for the registry's lists on every stream and reads none would otherwise
// have the node build and hold one per stream: 16 bytes a topic, and the
// answer encoded, for a request of 5 bytes.
func (cs *connState) listTurn(wait time.Duration) bool {
	select {
	case cs.lists <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case cs.lists <- struct{}{}:
		return true
	case <-t.C:
	case <-cs.ctx.Done():
	}
	return false
}

// readFrame reads one frame: the header may take up to idle, the body up to
// the read timeout once the header has arrived (wd enforces both).
// Oversized frames are refused before their body is read, and the body's
// buffer grows only as its bytes arrive, within the node's budget of bytes
// in flight.
//
// The body is read into buf when it has room (a buffer a stream server
// kept from an earlier frame), else into a new one.
func (n *Node) readFrame(cs *connState, rd *frameBuffer, wd *readWatchdog, idle time.Duration, limit int, buf []byte) ([]byte, error) {
	wd.set(time.Now().Add(idle))
	hdr, err := rd.header()
	if err != nil {
		return nil, err
	}
	size := int(binary.BigEndian.Uint32(hdr))
	switch {
	case size == 0:
		return nil, wire.ErrEmptyFrame
	case size > limit:
		return nil, &wire.FrameTooLargeError{Len: size, Limit: limit}
	}
	deadline := time.Now().Add(n.cfg.ReadTimeout)
	wd.set(deadline)
	var held int64
	defer func() { cs.budget.release(held) }()
	return wire.ReadBodyInto(buf, rd, size, func(k int) error {
		if err := cs.budget.acquire(cs.ctx, int64(k), deadline); err != nil {
			return err
		}
		held += int64(k)
		return nil
	})
}

// frameBuffer reads a stream's frames for its stream server, reading
// ahead into a small buffer of fixed size: one Read usually brings a
// request's length prefix, its body and, with a stream per request, the
// stream's FIN, where reading the prefix and the body apart took two
// Reads, and a third for the FIN. What it holds follows the bytes
// received and never passes readAhead, whatever length a peer declares;
// a body is read past the buffer straight into the body's own buffer,
// never beyond the frame's end.
type frameBuffer struct {
	s      *quic.Stream
	buf    [readAhead]byte
	off, n int   // buf[off:n] is read and not yet used
	err    error // what the stream's last Read returned; later reads return it
}

// readAhead is how much a frameBuffer reads at once: a typical request
// and its length prefix fit.
const readAhead = 512

func (fb *frameBuffer) reset(s *quic.Stream) {
	fb.s, fb.off, fb.n, fb.err = s, 0, 0, nil
}

// header returns the next frame's length prefix, valid until the next
// read. Its errors are io.ReadFull's: io.EOF when the stream ends before
// the prefix starts, io.ErrUnexpectedEOF inside it.
func (fb *frameBuffer) header() ([]byte, error) {
	if fb.n-fb.off < wire.FrameHeaderLen {
		fb.n = copy(fb.buf[:], fb.buf[fb.off:fb.n])
		fb.off = 0
		for fb.n < wire.FrameHeaderLen {
			if fb.err != nil {
				if fb.err == io.EOF && fb.n > 0 {
					return nil, io.ErrUnexpectedEOF
				}
				return nil, fb.err
			}
			var m int
			m, fb.err = fb.s.Read(fb.buf[fb.n:])
			fb.n += m
		}
	}
	hdr := fb.buf[fb.off : fb.off+wire.FrameHeaderLen]
	fb.off += wire.FrameHeaderLen
	return hdr, nil
}

// Read reads what was read ahead, then the stream.
func (fb *frameBuffer) Read(p []byte) (int, error) {
	if fb.off < fb.n {
		m := copy(p, fb.buf[fb.off:fb.n])
		fb.off += m
		return m, nil
	}
	if fb.err != nil {
		return 0, fb.err
	}
	var m int
	m, fb.err = fb.s.Read(p)
	return m, fb.err
}

// byteBudget bounds the bytes of frames being received at once over the
// whole node by one class of peers (Config.MaxBytesInFlight). A reader takes budget before its
// buffer grows and gives it back once the frame is read; one that cannot
// get it by its read deadline is cut off like any slow sender.
type byteBudget struct {
	sem  *semaphore.Weighted
	size int64
	used atomic.Int64 // for the metric
}

func newByteBudget(size int64) *byteBudget {
	return &byteBudget{sem: semaphore.NewWeighted(size), size: size}
}

// tryAcquire takes k bytes of the budget if they are free now.
func (b *byteBudget) tryAcquire(k int64) bool {
	if !b.sem.TryAcquire(k) {
		return false
	}
	b.used.Add(k)
	return true
}

func (b *byteBudget) acquire(ctx context.Context, k int64, deadline time.Time) error {
	if !b.sem.TryAcquire(k) {
		ctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		if err := b.sem.Acquire(ctx, k); err != nil {
			return os.ErrDeadlineExceeded
		}
	}
	b.used.Add(k)
	return nil
}

func (b *byteBudget) release(k int64) {
	if k > 0 {
		b.used.Add(-k)
		b.sem.Release(k)
	}
}

// sharedBudget is a budget a class of peers shares and, for readers,
// their source IP's share of it (host; nil for brokers and operators).
// The share is taken first, so that a peer waiting behind others of its
// own IP holds nothing of what other IPs wait for; both go back together.
// With all nil (a connState a test made) it bounds nothing.
type sharedBudget struct{ all, host *byteBudget }

// size is the most one acquire can take.
func (b sharedBudget) size() int64 {
	if b.host != nil {
		return min(b.all.size, b.host.size)
	}
	return b.all.size
}

// tryAcquire takes k of both if they are free now.
func (b sharedBudget) tryAcquire(k int64) bool {
	if b.all == nil {
		return true
	}
	if b.host != nil && !b.host.tryAcquire(k) {
		return false
	}
	if !b.all.tryAcquire(k) {
		if b.host != nil {
			b.host.release(k)
		}
		return false
	}
	return true
}

// acquire waits for k of both until deadline or ctx's end.
func (b sharedBudget) acquire(ctx context.Context, k int64, deadline time.Time) error {
	if b.all == nil {
		return nil
	}
	if b.host != nil {
		if err := b.host.acquire(ctx, k, deadline); err != nil {
			return err
		}
	}
	if err := b.all.acquire(ctx, k, deadline); err != nil {
		if b.host != nil {
			b.host.release(k)
		}
		return err
	}
	return nil
}

// release gives back k of both.
func (b sharedBudget) release(k int64) {
	if b.all == nil {
		return
	}
	b.all.release(k)
	if b.host != nil {
		b.host.release(k)
	}
}

// budgetShareOfHost is the part of the readers' budgets of bytes in
// flight and of answers one source IP may hold: a quarter (of bytes in
// flight at least a frame, MaxRequestLen), so that it takes four IPs, not
// one, to keep every reader's requests or large answers waiting. (Peers
// behind one NAT share their IP's quarter, as they share its connections.)
const budgetShareOfHost = 4

// hostShares gives each source IP with reader connections a budget of its
// own, of size bytes, for as long as it has connections.
type hostShares struct {
	size  int64
	mu    sync.Mutex
	hosts map[string]*hostShare
}

type hostShare struct {
	budget *byteBudget
	conns  int
}

func newHostShares(size int64) *hostShares {
	return &hostShares{size: size, hosts: make(map[string]*hostShare)}
}

// take returns host's budget for one more of its connections; give it
// back with give once the connection ends.
func (h *hostShares) take(host string) *byteBudget {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.hosts[host]
	if s == nil {
		s = &hostShare{budget: newByteBudget(h.size)}
		h.hosts[host] = s
	}
	s.conns++
	return s.budget
}

// give ends one connection's use of host's budget; the budget goes with
// the host's last connection (a stream of it still writing gives its bytes
// back to that budget, which nobody takes from any more).
func (h *hostShares) give(host string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.hosts[host]; s != nil {
		if s.conns--; s.conns <= 0 {
			delete(h.hosts, host)
		}
	}
}

// endStream closes a stream whose read failed, telling the peer why when
// the stream is still usable for that.
func (n *Node) endStream(w *streamWriter, err error) {
	if errors.Is(err, io.EOF) {
		return // the peer finished: a clean end, without the allocation of tooLarge
	}
	var tooLarge *wire.FrameTooLargeError
	switch {
	case errors.As(err, &tooLarge):
		n.stats.badFrames.Inc()
		w.write(errorFrame(0, 0, wire.Errorf(wire.CodeFrameTooLarge, "%v", err)))
		w.s.CancelRead(codeStreamAbort)
	case errors.Is(err, wire.ErrEmptyFrame):
		n.stats.badFrames.Inc()
		w.write(errorFrame(0, 0, wire.Errorf(wire.CodeBadRequest, "empty frame")))
		w.s.CancelRead(codeStreamAbort)
	case errors.Is(err, os.ErrDeadlineExceeded):
		n.stats.timeouts.Inc()
		w.s.CancelRead(codeStreamTimeout)
		w.s.CancelWrite(codeStreamTimeout)
	default:
		w.s.CancelRead(codeStreamAbort)
	}
}

func errorFrame(t wire.Type, id uint64, e *wire.Error) *wire.Frame {
	return &wire.Frame{Type: t, ID: id, Error: e}
}
