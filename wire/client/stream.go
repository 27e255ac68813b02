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
	out []byte
	in  frameReader
	rf  wire.Frame
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
	// The deadline goes on the stream itself, not on a derived context: no
	// context, timer or goroutine per call. A context that can be
	// cancelled gets an AfterFunc for its cancellation; one that cannot
	// (context.Background) costs nothing.
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(st.conn.cfg.RequestTimeout)
	}
	st.s.SetDeadline(deadline)
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { st.s.SetDeadline(time.Now()) }) // cancellation, not only the deadline
		defer stop()
	}
	st.id++
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
	for {
		rf, err := st.read()
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

// read reads and decodes the next frame into st.rf, keeping the capacity
// of its body for the next.
func (st *Stream) read() (*wire.Frame, error) {
	b, err := st.in.next(st.s, st.conn.cfg.MaxResponseLen)
	if err != nil {
		return nil, err
	}
	st.rf = wire.Frame{Body: st.rf.Body[:0]}
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
	st.s.CancelRead(0)
	return st.s.Close()
}
