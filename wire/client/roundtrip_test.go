package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
)

// routesPeer is a QUIC server on loopback that answers every frame on
// every stream with answer as the body (same type and id), and finishes a
// stream when the client finishes its side: a node's get-routes path
// without the node, for round-trip tests and benchmarks of the client.
func routesPeer(tb testing.TB, answer *wire.Routes) (addr string, conf *tls.Config) {
	tb.Helper()
	body := wire.AppendRoutes(nil, answer)
	return testPeer(tb, func(s *quic.Stream) { answerStream(s, body) })
}

func answerStream(s *quic.Stream, body []byte) {
	var out []byte
	for {
		f, err := wire.ReadFrame(s, wire.DefaultMaxRequestLen)
		if errors.Is(err, io.EOF) {
			s.Close()
			return
		}
		if err != nil {
			s.CancelWrite(0)
			return
		}
		if out, err = wire.AppendFrame(out[:0], &wire.Frame{Type: f.Type, ID: f.ID, Body: body}); err != nil {
			s.CancelWrite(0)
			return
		}
		if _, err := s.Write(out); err != nil {
			return
		}
	}
}

// benchAnswer is a node's answer to a one-topic route read: the route,
// the freshness of its two broker groups and the node's state.
func benchAnswer(tb testing.TB) *wire.Routes {
	route, err := wire.Marshal(&wire.Route{Queues: []wire.QueueData{{BrokerName: "broker-0", ReadQueues: 8, WriteQueues: 8, Perm: 6},
		{BrokerName: "broker-1", ReadQueues: 8, WriteQueues: 8, Perm: 6}},
		Brokers: []wire.BrokerData{{Cluster: "BenchCluster", Name: "broker-0", Zone: "zone-0", Addrs: map[int64]string{0: "10.0.0.0:10911", 1: "10.0.0.1:10911"}},
			{Cluster: "BenchCluster", Name: "broker-1", Zone: "zone-1", Addrs: map[int64]string{0: "10.0.1.0:10911", 1: "10.0.1.1:10911"}}}})
	if err != nil {
		tb.Fatal(err)
	}
	return &wire.Routes{Results: []wire.RouteResult{{Topic: "rmq_bench_topic_0001", Version: wire.RouteVersion(route), Route: route}},
		Groups: []wire.GroupFreshness{{BrokerName: "broker-0", AgeMs: 1200, DeadlineInMs: 3598800}, {BrokerName: "broker-1", AgeMs: 1300, DeadlineInMs: 3598700}},
		Node:   wire.NodeState{NodeID: "node-7f3a", StartedMs: 1735689000000}}
}

// BenchmarkRouteRoundTrip is one route read over real QUIC on loopback,
// on a long-lived stream, on the connection's shared pipe and on a stream
// of its own, the answer decoded
// into a Routes reused between calls as the bench's route op does.
func BenchmarkRouteRoundTrip(b *testing.B) {
	answer := benchAnswer(b)
	addr, conf := routesPeer(b, answer)
	c, err := Dial(context.Background(), addr, Config{TLS: conf})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	q := &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "rmq_bench_topic_0001"}}}
	ctx := context.Background()
	check := func(out *wire.Routes) {
		if len(out.Results) != 1 || out.Results[0].Status != wire.StatusOK || len(out.Groups) != 2 {
			b.Fatalf("answer %+v", out)
		}
	}
	b.Run("Stream", func(b *testing.B) {
		st, err := c.OpenStream(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		b.ReportAllocs()
		var out wire.Routes
		for b.Loop() {
			if err := st.Call(ctx, wire.TypeGetRoutes, q, &out); err != nil {
				b.Fatal(err)
			}
			check(&out)
		}
	})
	b.Run("Pipe", func(b *testing.B) {
		b.ReportAllocs()
		var out wire.Routes
		for b.Loop() {
			if err := c.Call(ctx, wire.TypeGetRoutes, q, &out); err != nil {
				b.Fatal(err)
			}
			check(&out)
		}
	})
	b.Run("CallOnce", func(b *testing.B) {
		b.ReportAllocs()
		var out wire.Routes
		for b.Loop() {
			if err := c.CallOnce(ctx, wire.TypeGetRoutes, q, &out); err != nil {
				b.Fatal(err)
			}
			check(&out)
		}
	})
}

// TestRouteRoundTrip: calls on a long-lived stream and on streams of
// their own, over QUIC on loopback, each decode the answer the peer sent,
// into a fresh Routes and into one reused from the call before; a large
// answer (past what a stream keeps buffered) comes through whole.
func TestRouteRoundTrip(t *testing.T) {
	for _, size := range []string{"small", "large"} {
		answer := benchAnswer(t)
		if size == "large" {
			for i := range 6000 { // about 120 KB, past keepBuffer
				answer.Results = append(answer.Results, wire.RouteResult{Topic: fmt.Sprintf("topic_%05d", i), Status: wire.StatusNotModified, Version: uint64(i) + 1})
			}
		}
		addr, conf := routesPeer(t, answer)
		c, err := Dial(context.Background(), addr, Config{TLS: conf})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		st, err := c.OpenStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		q := &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "rmq_bench_topic_0001"}}}
		var reused wire.Routes
		for i := range 40 {
			var fresh wire.Routes
			call := st.Call
			if i%2 == 1 {
				call = c.CallOnce
			}
			if err := call(ctx, wire.TypeGetRoutes, q, &fresh); err != nil {
				t.Fatalf("%s, call %d: %v", size, i, err)
			}
			if err := call(ctx, wire.TypeGetRoutes, q, &reused); err != nil {
				t.Fatalf("%s, call %d: %v", size, i, err)
			}
			if !reflect.DeepEqual(&fresh, answer) || !reflect.DeepEqual(&reused, answer) {
				t.Fatalf("%s, call %d: answer %+v / %+v, want %+v", size, i, fresh.Node, reused.Node, answer.Node)
			}
		}
		st.Close()
		c.Close()
	}
}
