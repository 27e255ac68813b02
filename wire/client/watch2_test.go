package client

import (
	"context"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
)

// TestWatchAckAfterMoreEventsThanTheBuffer: PROTOCOL.md 11 lets a watch's
// initial events arrive before its WatchAck. A client that sends the watch
// and only then reads Events must still get the ack when more events than
// EventBuffer come first: the pipe used to stop reading the stream once
// Events was full, so the ack behind the events was never read and the
// Call failed at its deadline.
func TestWatchAckAfterMoreEventsThanTheBuffer(t *testing.T) {
	const events = 3 * EventBuffer
	addr, conf := testPeer(t, func(s *quic.Stream) {
		var fr frameReader
		b, err := fr.next(s, 1<<20)
		if err != nil {
			return
		}
		var req wire.Frame
		if wire.DecodeFrame(b, &req) != nil {
			return
		}
		for i := range events {
			body, _ := wire.Marshal(wire.RouteEvent{Result: wire.RouteResult{Topic: "t", Status: wire.StatusOK, Version: uint64(i + 1)}})
			out, _ := wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeRouteEvent, Body: body})
			if _, err := s.Write(out); err != nil {
				return
			}
		}
		body, _ := wire.Marshal(wire.WatchAck{Watching: 1})
		out, _ := wire.AppendFrame(nil, &wire.Frame{Type: req.Type, ID: req.ID, Body: body})
		s.Write(out)
		<-s.Context().Done()
	})
	c, err := Dial(context.Background(), addr, Config{TLS: conf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := c.OpenPipe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var ack wire.WatchAck
	if err := p.Call(ctx, wire.TypeWatch, &wire.Watch{Topics: []wire.TopicVersion{{Topic: "t"}}}, &ack); err != nil {
		t.Fatalf("watch answered after %d events, Events not read yet: %v", events, err)
	}
	for i := range events { // every event, in order
		select {
		case f := <-p.Events():
			var ev wire.RouteEvent
			if err := f.DecodeBody(&ev); err != nil || ev.Result.Version != uint64(i+1) {
				t.Fatalf("event %d: version %d, err %v", i, ev.Result.Version, err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d events", i, events)
		}
	}
}

// TestEventOverflowBoundedInBytes: the events a pipe holds for a waiting
// Call are bounded in bytes, not only in count, so that a peer pushing
// large frames ahead of a response cannot make the client hold
// maxOverflow of them.
func TestEventOverflowBoundedInBytes(t *testing.T) {
	const eventLen = 64 << 10
	wrote := make(chan int, 1)
	addr, conf := testPeer(t, func(s *quic.Stream) {
		var fr frameReader
		if _, err := fr.next(s, 1<<20); err != nil {
			return
		}
		route, _ := wire.Marshal(make([]byte, eventLen)) // a CBOR byte string
		body, err := wire.Marshal(wire.RouteEvent{Result: wire.RouteResult{Topic: "t", Status: wire.StatusOK, Version: 1, Route: route}})
		if err != nil {
			panic(err)
		}
		out, _ := wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeRouteEvent, Body: body})
		n := 0
		s.SetWriteDeadline(time.Now().Add(3 * time.Second)) // stops once the client stops reading
		for n < 4096 {
			if _, err := s.Write(out); err != nil {
				break
			}
			n++
		}
		wrote <- n
		<-s.Context().Done()
	})
	c, err := Dial(context.Background(), addr, Config{TLS: conf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := c.OpenPipe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second)
	defer callCancel()
	go p.Call(callCtx, wire.TypeWatch, &wire.Watch{Topics: []wire.TopicVersion{{Topic: "t"}}}, nil)
	var n int
	select {
	case n = <-wrote:
	case <-ctx.Done():
		t.Fatal("the peer never stopped writing")
	}
	// What the peer wrote beyond EventBuffer and the stream's window is
	// what the pipe holds.
	held := (n - EventBuffer) * eventLen
	if held > 2*maxOverflowBytes {
		t.Fatalf("the pipe read %d events of %d bytes: about %d MiB held for a waiting Call", n, eventLen, held>>20)
	}
}

// TestPipeStopsReadingOnceCallsAreAnswered: the overflow is for events
// ahead of a waiting Call's response only. Once every Call is answered, a
// pipe whose Events nobody reads stops reading the stream (QUIC flow
// control slows the node) instead of taking up to maxOverflowBytes more.
func TestPipeStopsReadingOnceCallsAreAnswered(t *testing.T) {
	const eventLen = 1 << 10
	wrote := make(chan int, 1)
	addr, conf := testPeer(t, func(s *quic.Stream) {
		var fr frameReader
		b, err := fr.next(s, 1<<20)
		if err != nil {
			return
		}
		var req wire.Frame
		if wire.DecodeFrame(b, &req) != nil {
			return
		}
		ack, _ := wire.Marshal(wire.WatchAck{Watching: 1})
		out, _ := wire.AppendFrame(nil, &wire.Frame{Type: req.Type, ID: req.ID, Body: ack})
		if _, err := s.Write(out); err != nil {
			return
		}
		route, _ := wire.Marshal(make([]byte, eventLen))
		body, _ := wire.Marshal(wire.RouteEvent{Result: wire.RouteResult{Topic: "t", Status: wire.StatusOK, Version: 1, Route: route}})
		out, _ = wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeRouteEvent, Body: body})
		n := 0
		s.SetWriteDeadline(time.Now().Add(3 * time.Second)) // stops once the client stops reading
		for n < 20_000 {
			if _, err := s.Write(out); err != nil {
				break
			}
			n++
		}
		wrote <- n
		<-s.Context().Done()
	})
	c, err := Dial(context.Background(), addr, Config{TLS: conf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := c.OpenPipe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Call(ctx, wire.TypeWatch, &wire.Watch{Topics: []wire.TopicVersion{{Topic: "t"}}}, nil); err != nil {
		t.Fatal(err)
	}
	var n int
	select {
	case n = <-wrote:
	case <-ctx.Done():
		t.Fatal("the peer never stopped writing")
	}
	// EventBuffer events, and what the stream's receive window holds.
	if held := n - EventBuffer; held*eventLen > maxOverflowBytes/2 {
		t.Fatalf("the pipe read %d events of %d bytes with no Call waiting: it did not stop reading", n, eventLen)
	}
}

// TestPipeStopsReadingAfterAnOverflow: a pipe whose overflow was used
// for a Call (more than EventBuffer events came before its response)
// stops reading the stream, once the Call is answered, as soon as it
// holds EventBuffer events nobody takes, not maxOverflowBytes.
func TestPipeStopsReadingAfterAnOverflow(t *testing.T) {
	const eventLen = 1 << 10
	wrote := make(chan int, 1)
	addr, conf := testPeer(t, func(s *quic.Stream) {
		var fr frameReader
		b, err := fr.next(s, 1<<20)
		if err != nil {
			return
		}
		var req wire.Frame
		if wire.DecodeFrame(b, &req) != nil {
			return
		}
		first, _ := wire.Marshal(wire.RouteEvent{Result: wire.RouteResult{Topic: "t", Status: wire.StatusOK, Version: 1}})
		for range 2 * EventBuffer {
			out, _ := wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeRouteEvent, Body: first})
			if _, err := s.Write(out); err != nil {
				return
			}
		}
		ack, _ := wire.Marshal(wire.WatchAck{Watching: 1})
		out, _ := wire.AppendFrame(nil, &wire.Frame{Type: req.Type, ID: req.ID, Body: ack})
		if _, err := s.Write(out); err != nil {
			return
		}
		route, _ := wire.Marshal(make([]byte, eventLen))
		body, _ := wire.Marshal(wire.RouteEvent{Result: wire.RouteResult{Topic: "t", Status: wire.StatusOK, Version: 1, Route: route}})
		out, _ = wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeRouteEvent, Body: body})
		n := 0
		s.SetWriteDeadline(time.Now().Add(3 * time.Second)) // stops once the client stops reading
		for n < 20_000 {
			if _, err := s.Write(out); err != nil {
				break
			}
			n++
		}
		wrote <- n
		<-s.Context().Done()
	})
	c, err := Dial(context.Background(), addr, Config{TLS: conf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := c.OpenPipe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Call(ctx, wire.TypeWatch, &wire.Watch{Topics: []wire.TopicVersion{{Topic: "t"}}}, nil); err != nil {
		t.Fatal(err)
	}
	var n int
	select {
	case n = <-wrote:
	case <-ctx.Done():
		t.Fatal("the peer never stopped writing")
	}
	// EventBuffer events, and what the stream's receive window holds.
	if held := n - EventBuffer; held*eventLen > maxOverflowBytes/2 {
		t.Fatalf("the pipe read %d events of %d bytes with no Call waiting: it did not stop reading", n, eventLen)
	}
}
