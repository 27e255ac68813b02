package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
)

// Stream is a long-lived stream for one caller at a time: Call writes the
// request and reads its response on the calling goroutine, with no reader
// goroutine and no hand-off, the cheapest way to send many requests in a
// row. It does not deliver pushes; use a Pipe to watch. Concurrent calls
// are serialized.
type Stream struct {
	s    *quic.Stream
	conn *Conn
	mu   sync.Mutex
	id   uint64
	err  error // set once the stream is unusable
	// The request and response buffers and the response frame, reused by
	// every call: nothing of them outlives the call (the response is
	// decoded into the caller's value, which copies what it keeps).
	out    []byte
	in     frameReader
	rf     wire.Frame
	checks wire.RouteChecks // routes this stream's answers brought, checked

	// Call deadlines. Rather than a deadline on the QUIC stream per call
	// (two locked updates per call, and a timer per blocking Read inside
	// quic-go), one timer per stream watches the call in flight; when
	// that call's time is up (or its context is cancelled) it sets the
	// stream's deadline to now, which ends the call as a deadline on the
	// stream would. Calls whose deadlines only move later (a loop with no
	// context deadline) never re-arm the timer: it fires once per request
	// timeout and re-arms itself for the call then in flight.
	//
	// wmu guards the fields below. Lock order: mu (held by Call), then
	// wmu; the timer and the cancellation hook take wmu alone.
	wmu     sync.Mutex
	watch   *time.Timer
	armed   time.Time // when watch fires; zero once it fired or stopped
	call    uint64    // the call in flight (its id) or the last one
	due     time.Time // the deadline of call
	tripped bool      // the stream's deadline was set to end a call: clear it before the next
}

// OpenStream opens a long-lived stream for sequential calls.
func (c *Conn) OpenStream(ctx context.Context) (*Stream, error) {
	s, err := c.qc.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("open stream to %s: %w", c.addr, err)
	}
	return &Stream{s: s, conn: c}, nil
}

// Call sends a request and reads its response. After any transport error
// (including the context ending mid-call) the stream is unusable and every
// later call returns that error: open a new one.
func (st *Stream) Call(ctx context.Context, t wire.Type, req, resp any) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return st.err
	}
	// The deadline is watched by the stream's timer, not by a derived
	// context: no context, timer or goroutine per call. A context that can
	// be cancelled gets an AfterFunc for its cancellation; one that cannot
	// (context.Background) costs nothing.
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(st.conn.cfg.RequestTimeout)
	}
	st.id++
	st.watchCall(st.id, deadline)
	if ctx.Done() != nil {
		id := st.id
		stop := context.AfterFunc(ctx, func() { st.end(id) }) // cancellation, not only the deadline
		defer stop()
	}
	var err error
	if st.out, err = wire.AppendRequest(st.out[:0], t, st.id, req); err != nil {
		return err // nothing was sent: the stream is still in step
	}
	_, err = st.s.Write(st.out)
	if cap(st.out) > keepBuffer {
		st.out = nil
	}
	if err != nil {
		return st.fail(ctx, t, err)
	}
	routes, _ := resp.(*wire.Routes)
	for {
		b, err := st.in.next(st.s, st.conn.cfg.MaxResponseLen)
		if err != nil {
			return st.fail(ctx, t, err)
		}
		st.rf = wire.Frame{}
		if routes != nil && wire.DecodeRoutesFrame(b, st.id, &st.rf, routes, &st.checks) {
			return nil // a node's answer to this call, its body walked once
		}
		rf, err := st.decode(b)
		if err != nil {
			return st.fail(ctx, t, err)
		}
		if rf.ID == st.id {
			return decodeResponse(rf, resp)
		}
		if rf.ID == 0 && rf.Error != nil {
			// The node could not tell which request it answers (a frame it
			// could not decode): the stream is out of step.
			return st.fail(ctx, t, rf.Error)
		}
		// A response to an earlier call that gave up: skip it.
	}
}

// watchCall makes call id the one the timer watches, due at deadline,
// first clearing a deadline left on the stream for an earlier call.
func (st *Stream) watchCall(id uint64, deadline time.Time) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	st.call, st.due = id, deadline
	if st.tripped {
		st.s.SetDeadline(time.Time{})
		st.tripped = false
	}
	switch {
	case st.watch == nil:
		st.watch = time.AfterFunc(time.Until(deadline), st.expire)
	case st.armed.IsZero() || deadline.Before(st.armed):
		st.watch.Reset(time.Until(deadline))
	default:
		return // armed for earlier: expire re-arms for this call then
	}
	st.armed = deadline
}

// expire runs when the timer fires: it ends the call watched if its time
// is up, or re-arms the timer for the rest of it.
func (st *Stream) expire() {
	st.wmu.Lock()
	st.armed = time.Time{}
	if d := time.Until(st.due); d > 0 && st.watch != nil {
		st.watch.Reset(d)
		st.armed = st.due
		st.wmu.Unlock()
		return
	}
	id := st.call
	st.wmu.Unlock()
	st.end(id)
}

// end ends call id, if it is still the one watched, by setting the
// stream's deadline to now: its Read or Write returns at once. After the
// call has returned this is harmless, as the next call clears it.
func (st *Stream) end(id uint64) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if st.call == id && st.watch != nil {
		st.tripped = true
		st.s.SetDeadline(time.Now())
	}
}

// decode decodes the frame b into st.rf, which starts empty: its body is
// never decoded into the last one's memory, which a decoder that points
// bodies into the frame's bytes would have placed in the reader's buffer.
func (st *Stream) decode(b []byte) (*wire.Frame, error) {
	st.rf = wire.Frame{}
	if err := wire.DecodeFrame(b, &st.rf); err != nil {
		return nil, err
	}
	return &st.rf, nil
}

func (st *Stream) fail(ctx context.Context, t wire.Type, err error) error {
	err = callErr(ctx, err)
	st.err = fmt.Errorf("%s to %s: %w", t, st.conn.addr, err)
	st.s.CancelRead(0)
	st.s.CancelWrite(0)
	return st.err
}

// Close finishes the stream.
func (st *Stream) Close() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err == nil {
		st.err = errors.New("stream closed")
	}
	st.wmu.Lock()
	if st.watch != nil {
		st.watch.Stop()
		st.watch = nil // and expire and end, if they run now, do nothing
	}
	st.wmu.Unlock()
	st.s.CancelRead(0)
	return st.s.Close()
}
