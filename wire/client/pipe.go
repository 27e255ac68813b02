package client

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
)

// EventBuffer is how many pushed frames a Pipe holds for its reader before
// it stops reading the stream (and so, through QUIC flow control, slows the
// node down). While a Call waits for its response, a Pipe reads on past
// it, holding up to 8 MiB more, so that the response is not stuck behind
// events nobody takes yet (see Events).
const EventBuffer = 256

// Pipe is a long-lived stream carrying pipelined requests matched by id. A
// broker's session with a node is a Pipe; so is a watch. It is safe for
// concurrent use.
type Pipe struct {
	s      *quic.Stream
	conn   *Conn
	wmu    sync.Mutex // serializes frame writes
	mu     sync.Mutex
	nextID uint64
	wait   map[uint64]chan *wire.Frame
	err    error
	done   chan struct{}
	events chan *wire.Frame
	// called is signalled when a Call registers, so that a read loop
	// waiting for room on events goes on reading (toward the response)
	// through overflow instead.
	called chan struct{}
	// overflow, once made, carries every later event to events through
	// feed, in order; the read loop's own.
	overflow chan *wire.Frame
	fed      chan struct{} // closed when feed returns
	// held is the bytes of the events in overflow (maxOverflowBytes);
	// room is signalled when feed hands one over.
	held atomic.Int64
	room chan struct{}
	// onEvent, when set, is given each pushed frame on the read goroutine
	// instead of events (OpenWatchPipe).
	onEvent func(*wire.Frame)
}

// OpenPipe opens a new long-lived stream.
func (c *Conn) OpenPipe(ctx context.Context) (*Pipe, error) {
	return c.openPipe(ctx, nil)
}

// OpenWatchPipe opens a long-lived stream whose pushed frames (id 0) are
// given to onEvent, one at a time, on the goroutine that reads the stream,
// as soon as each is read: no channel and no second goroutine between the
// stream and the watcher, which matters when thousands of watch streams
// share a few cores. Events then delivers nothing (it is closed when the
// pipe ends, so ranging over it waits for the last onEvent to return).
//
// The frame and its body are onEvent's only until it returns: they share
// the pipe's read buffer, so onEvent copies what it keeps. While onEvent
// runs the stream is not read, responses to Call included:
// it must not block, and must not Call on the same pipe. A slow onEvent
// slows the node's pushes to this stream through QUIC flow control, as a
// full Events buffer does.
func (c *Conn) OpenWatchPipe(ctx context.Context, onEvent func(*wire.Frame)) (*Pipe, error) {
	if onEvent == nil {
		return nil, fmt.Errorf("OpenWatchPipe: onEvent is nil")
	}
	return c.openPipe(ctx, onEvent)
}

func (c *Conn) openPipe(ctx context.Context, onEvent func(*wire.Frame)) (*Pipe, error) {
	s, err := c.qc.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("open stream to %s: %w", c.addr, err)
	}
	p := &Pipe{
		s:       s,
		conn:    c,
		wait:    make(map[uint64]chan *wire.Frame),
		done:    make(chan struct{}),
		onEvent: onEvent,
		called:  make(chan struct{}, 1),
	}
	if onEvent == nil {
		p.events = make(chan *wire.Frame, EventBuffer)
	} else {
		p.events = make(chan *wire.Frame)
	}
	go p.readLoop()
	return p, nil
}

// Events delivers frames the node pushes (id 0), such as route events on a
// watch (for a pipe from OpenWatchPipe, none: they go to its onEvent). It
// is closed when the pipe ends, after the last event was handed over.
// While a Call waits, events past EventBuffer are held (up to 16,384
// more, 8 MiB) so that its response is read: a watch's initial events may come
// before its WatchAck (PROTOCOL.md 11), and the caller may read Events only
// once the watch returned. Events still held when the pipe ends may be
// dropped, as the client re-watches then anyway.
func (p *Pipe) Events() <-chan *wire.Frame { return p.events }

// Done is closed when the pipe ends; Err then says why.
func (p *Pipe) Done() <-chan struct{} { return p.done }

// Err returns why the pipe ended, or nil while it is open.
func (p *Pipe) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *Pipe) closed() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Close ends the pipe: pending calls fail with ErrClosed.
func (p *Pipe) Close() error {
	p.s.CancelRead(0)
	p.s.Close()
	p.fail(ErrClosed)
	return nil
}

// Call sends a request and waits for its response.
func (p *Pipe) Call(ctx context.Context, t wire.Type, req, resp any) error {
	ctx, cancel := p.conn.withTimeout(ctx)
	defer cancel()
	id, ch, err := p.register()
	if err != nil {
		return err
	}
	bufs := getCallBuffers() // the request's bytes, in a buffer reused across calls
	bufs.out, err = wire.AppendRequest(bufs.out, t, id, req)
	if err == nil {
		deadline, _ := ctx.Deadline()
		err = p.writeBy(bufs.out, deadline)
	}
	putCallBuffers(bufs)
	if err != nil {
		p.unregister(id)
		return fmt.Errorf("%s to %s: %w", t, p.conn.addr, err)
	}
	select {
	case rf := <-ch:
		if rf == nil {
			return fmt.Errorf("%s to %s: %w", t, p.conn.addr, p.Err())
		}
		return decodeResponse(rf, resp)
	case <-ctx.Done():
		p.unregister(id) // a late response is dropped
		return fmt.Errorf("%s to %s: %w", t, p.conn.addr, ctx.Err())
	}
}

// writeBy writes a frame (its length prefix included), giving up at the deadline: a node that stops
// reading (QUIC flow control fills up) cannot block the caller, or the
// other callers of the pipe, beyond their contexts. A write cut off
// midway leaves the stream unusable, so any write error ends the pipe.
func (p *Pipe) writeBy(frame []byte, deadline time.Time) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.s.SetWriteDeadline(deadline)
	if _, err := p.s.Write(frame); err != nil {
		p.fail(err)
		return err
	}
	return nil
}

func (p *Pipe) register() (uint64, chan *wire.Frame, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return 0, nil, p.err
	}
	p.nextID++
	ch := make(chan *wire.Frame, 1)
	p.wait[p.nextID] = ch
	select {
	case p.called <- struct{}{}:
	default:
	}
	return p.nextID, ch, nil
}

func (p *Pipe) unregister(id uint64) {
	p.mu.Lock()
	delete(p.wait, id)
	p.mu.Unlock()
}

func (p *Pipe) readLoop() {
	defer func() {
		if p.overflow != nil {
			close(p.overflow)
			<-p.fed
		}
		close(p.events)
	}()
	// One buffer for the stream's bytes (frameReader): one Read usually
	// brings a frame's length prefix and body together. A frame handed to
	// onEvent shares it (onEvent returns before the next read); anything
	// kept beyond that (a response, an event queued on events) is decoded
	// from a copy of its own.
	var fr frameReader
	var ev wire.Frame // the frame given to onEvent, reused
	for {
		b, err := fr.next(p.s, p.conn.cfg.MaxResponseLen)
		if err != nil {
			p.fail(err)
			return
		}
		if p.onEvent != nil {
			ev = wire.Frame{} // DecodeFrame leaves fields the frame omits as they were
			if err := wire.DecodeFrame(b, &ev); err != nil {
				p.fail(err)
				return
			}
			if ev.ID == 0 {
				p.onEvent(&ev)
				continue
			}
		}
		f, err := keepFrame(b)
		if err != nil {
			p.fail(err)
			return
		}
		if f.ID == 0 {
			if !p.queueEvent(f) {
				return
			}
			continue
		}
		p.mu.Lock()
		ch := p.wait[f.ID]
		delete(p.wait, f.ID)
		p.mu.Unlock()
		if ch != nil {
			ch <- f
		}
	}
}

// maxOverflow bounds the events a pipe holds beyond EventBuffer while a
// Call waits for its response: the initial events of one watch (at most
// the 10,000 topics a request may name) and then some.
const maxOverflow = 16 << 10

// maxOverflowBytes bounds the bytes of the events overflow holds.
const maxOverflowBytes = 8 << 20

// queueEvent hands a pushed frame to Events, waiting for room (and so,
// through QUIC flow control, slowing the node down) while no Call waits.
// While one does, or once one did, the event goes through overflow
// instead, so that the stream is read on to the response: PROTOCOL.md 11
// lets a watch's initial events come before its WatchAck, and a client
// that reads Events only after the watch returned would otherwise never
// get the ack. It reports false once the pipe ended.
func (p *Pipe) queueEvent(f *wire.Frame) bool {
	if p.overflow == nil {
		select {
		case p.events <- f:
			return true
		default:
		}
		for !p.callsWaiting() {
			select {
			case p.events <- f:
				return true
			case <-p.called: // a Call may be waiting now: read on for it
			case <-p.done:
				return false
			}
		}
		p.overflow = make(chan *wire.Frame, maxOverflow)
		p.fed = make(chan struct{})
		p.room = make(chan struct{}, 1)
		go p.feed()
	}
	// Full, or nothing to read on for (no Call waits) with events held
	// already: flow control again, as a full Events buffer is without the
	// overflow.
	for p.held.Load() >= maxOverflowBytes || (p.held.Load() > 0 && !p.callsWaiting()) {
		select {
		case <-p.room:
		case <-p.called:
		case <-p.done:
			return false
		}
	}
	p.held.Add(eventSize(f))
	select {
	case p.overflow <- f: // full: flow control again
		return true
	case <-p.done:
		return false
	}
}

// eventSize is about the memory a kept event takes.
func eventSize(f *wire.Frame) int64 { return int64(len(f.Body)) + 64 }

// feed moves overflow's events to Events, in order, until the pipe ends.
func (p *Pipe) feed() {
	defer close(p.fed)
	for f := range p.overflow {
		select {
		case p.events <- f:
		case <-p.done:
			return
		}
		p.held.Add(-eventSize(f))
		select {
		case p.room <- struct{}{}:
		default:
		}
	}
}

// callsWaiting reports whether a Call waits for its response.
func (p *Pipe) callsWaiting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.wait) > 0
}

// smallFrameLen is the longest frame keepFrame keeps in one allocation
// with its decoded Frame: the two fill a 256-byte size class (a Frame is
// 48 bytes).
const smallFrameLen = 256 - 48

// smallFrame is a decoded frame and the bytes its Body points into.
type smallFrame struct {
	f   wire.Frame
	buf [smallFrameLen]byte
}

// keepFrame decodes a frame that outlives the read buffer b (a response,
// an event queued on Events) from a copy of b. A small one, such as a
// route event, costs one allocation instead of two (the Frame and the
// copy): one fewer per pushed event on every watch stream read through
// Events.
func keepFrame(b []byte) (*wire.Frame, error) {
	if len(b) <= smallFrameLen {
		sf := new(smallFrame)
		n := copy(sf.buf[:], b)
		return &sf.f, wire.DecodeFrame(sf.buf[:n:n], &sf.f)
	}
	f := new(wire.Frame)
	return f, wire.DecodeFrame(bytes.Clone(b), f)
}

// fail ends the pipe once, waking every pending call.
func (p *Pipe) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return
	}
	p.err = err
	if err != ErrClosed {
		p.err = fmt.Errorf("stream ended: %w", err)
	}
	for id, ch := range p.wait {
		close(ch)
		delete(p.wait, id)
	}
	close(p.done)
	p.s.CancelWrite(0)
}
