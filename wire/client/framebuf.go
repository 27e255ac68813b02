package client

import (
	"encoding/binary"
	"io"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
)

// firstChunk is how much a frame reader allocates before anything has
// arrived: a route answer, its length prefix and the stream's FIN fit.
const firstChunk = 512

// keepBuffer is the largest buffer a stream keeps between calls; one
// grown past it for a large answer is let go after that answer, so a
// stream that once read a cluster-info does not pin it.
const keepBuffer = 64 << 10

// frameReader reads length-prefixed frames from one stream into a buffer
// it keeps between frames: a call costs no allocation for its response's
// bytes, and one Read usually brings the length prefix, the frame and the
// stream's FIN together. The buffer grows as bytes arrive (doubling, up
// to the frame's size), never to a length the peer declared up front, as
// wire.ReadFrameBytes does.
type frameReader struct {
	buf []byte // buf[off:] is read from the stream and not yet returned
	off int
	err error // what the stream's last Read returned; io.EOF once it ended
}

// next returns the next frame's bytes, valid until the next call. The
// errors are wire.ReadFrameBytes's: io.EOF when the stream ends cleanly
// before a frame starts, io.ErrUnexpectedEOF inside one, wire.ErrEmptyFrame,
// and a *wire.FrameTooLargeError (refused before the body is read).
func (fr *frameReader) next(r io.Reader, limit int) ([]byte, error) {
	fr.compact()
	if err := fr.fill(r, wire.FrameHeaderLen); err != nil {
		if err == io.EOF && len(fr.buf) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(fr.buf))
	limit = min(limit, wire.MaxFrameLen)
	switch {
	case n == 0:
		return nil, wire.ErrEmptyFrame
	case n > limit:
		return nil, &wire.FrameTooLargeError{Len: n, Limit: limit}
	}
	if err := fr.fill(r, wire.FrameHeaderLen+n); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	fr.off = wire.FrameHeaderLen + n
	return fr.buf[wire.FrameHeaderLen:fr.off:fr.off], nil
}

// pending reports whether bytes past the last frame were read.
func (fr *frameReader) pending() bool { return fr.off < len(fr.buf) }

// ended reports whether the stream's end was read.
func (fr *frameReader) ended() bool { return fr.err == io.EOF && !fr.pending() }

// compact drops the frame returned last, keeping what followed it, and
// lets go of a buffer grown past keepBuffer.
func (fr *frameReader) compact() {
	rest := fr.buf[fr.off:]
	fr.off = 0
	if cap(fr.buf) > keepBuffer && len(rest) <= firstChunk {
		fr.buf = append(make([]byte, 0, firstChunk), rest...)
		return
	}
	fr.buf = fr.buf[:copy(fr.buf, rest)]
}

// fill reads until the buffer holds n bytes or the stream fails.
func (fr *frameReader) fill(r io.Reader, n int) error {
	for len(fr.buf) < n {
		if fr.err != nil {
			return fr.err
		}
		if len(fr.buf) == cap(fr.buf) {
			size := max(firstChunk, min(2*cap(fr.buf), n))
			fr.buf = append(make([]byte, 0, size), fr.buf...)
		}
		var m int
		m, fr.err = r.Read(fr.buf[len(fr.buf):cap(fr.buf)])
		fr.buf = fr.buf[:len(fr.buf)+m]
	}
	return nil
}

// reset empties the reader for another stream.
func (fr *frameReader) reset() {
	if cap(fr.buf) > keepBuffer {
		fr.buf = nil
	}
	fr.buf, fr.off, fr.err = fr.buf[:0], 0, nil
}

// callBuffers are one call's request and response buffers, for a call on
// a stream of its own (CallOnce); a long-lived Stream keeps its own. They
// carry a timer too, which ends the call at its deadline: a deadline on
// the new stream would cost two locked updates and, inside quic-go, a
// new timer for the Read that waits for the answer. As a Stream's, the
// timer is only ever moved earlier: calls whose deadlines only move later
// (a loop with no context deadline) leave it armed, and it fires about
// once per request timeout, re-arming itself for the call then in flight,
// instead of a Reset and a Stop per call.
type callBuffers struct {
	out    []byte
	in     frameReader
	rf     wire.Frame
	checks wire.RouteChecks // routes the answers of these buffers' calls brought, checked

	mu    sync.Mutex // guards what follows, against watch's function
	watch *time.Timer
	armed time.Time    // when watch fires; zero when it is not armed
	s     *quic.Stream // the call's stream while it is in flight
	due   time.Time
}

// watchStream ends s at deadline, unless unwatch comes first.
func (b *callBuffers) watchStream(s *quic.Stream, deadline time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.s, b.due = s, deadline
	if !b.armed.IsZero() && !deadline.Before(b.armed) {
		return // armed for no later than deadline: expire re-arms for it
	}
	b.armed = deadline
	if b.watch == nil {
		b.watch = time.AfterFunc(time.Until(deadline), b.expire)
	} else {
		b.watch.Reset(time.Until(deadline))
	}
}

// unwatch ends the watch of the call's stream. The timer is left armed:
// when it fires with no call in flight it does nothing.
func (b *callBuffers) unwatch() {
	b.mu.Lock()
	b.s = nil
	b.mu.Unlock()
}

// expire sets the watched stream's deadline to now, which ends its Read
// or Write as the deadline on the stream would have. A run armed for an
// earlier call of these buffers finds a later due time and re-arms the
// timer for it; one with no call in flight does nothing.
func (b *callBuffers) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed = time.Time{}
	if b.s == nil {
		return
	}
	now := time.Now()
	if now.Before(b.due) {
		b.armed = b.due
		b.watch.Reset(b.due.Sub(now))
		return
	}
	b.s.SetDeadline(now)
}

var callBufferPool = sync.Pool{New: func() any { return new(callBuffers) }}

func getCallBuffers() *callBuffers { return callBufferPool.Get().(*callBuffers) }

func putCallBuffers(b *callBuffers) {
	if cap(b.out) > keepBuffer {
		b.out = nil
	}
	b.out = b.out[:0]
	b.in.reset()
	b.rf = wire.Frame{}
	callBufferPool.Put(b)
}
