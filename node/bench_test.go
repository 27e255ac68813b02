package node

import (
	"context"
	"fmt"
	"testing"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// BenchmarkHandleGetRoutes measures a node's own work for one single-topic
// route read, from a decoded frame to the encoded response frame in a
// reused buffer (as a stream's writer encodes it), without the network.
func BenchmarkHandleGetRoutes(b *testing.B) {
	tn := startNode(b, nil)
	for g := range 8 {
		reg := registration("c1", fmt.Sprintf("broker-%d", g), 0, fmt.Sprintf("10.0.0.%d:10911", g))
		for i := range 1000 {
			if i%8 == g || (i+1)%8 == g {
				reg.Topics = append(reg.Topics, wire.TopicConfig{Name: fmt.Sprintf("topic_%04d", i), ReadQueues: 8, WriteQueues: 8, Perm: 6})
			}
		}
		if _, err := tn.Registry().Register(toRegistration(reg)); err != nil {
			b.Fatal(err)
		}
	}
	cs := &connState{peer: peer{Identity: pki.Identity{Role: pki.RoleClient}}}
	frames := make([]*wire.Frame, 1000)
	for i := range frames {
		frames[i], _ = wire.NewRequest(wire.TypeGetRoutes, uint64(i+1), &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: fmt.Sprintf("topic_%04d", i)}}})
	}
	var watch *watcher
	w := &streamWriter{} // its buffer and spare answer, reused as a stream's request loop does
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		resp := tn.handle(cs, frames[i%len(frames)], w, &watch)
		var err error
		if w.buf, err = appendAnswer(w.buf[:0], &resp); err != nil || resp.Error != nil {
			b.Fatal(err, resp.Error)
		}
		w.keepRouteSet(resp.set)
		i++
	}
}

// benchRouteNode starts a node holding 1000 topics on 8 groups, 2 groups
// per topic, as the route workload of edgereg bench does.
func benchRouteNode(b *testing.B) (*testNode, []string) {
	tn := startNode(b, nil)
	topics := make([]string, 1000)
	for i := range topics {
		topics[i] = fmt.Sprintf("topic_%04d", i)
	}
	for g := range 8 {
		reg := registration("c1", fmt.Sprintf("broker-%d", g), 0, fmt.Sprintf("10.0.0.%d:10911", g))
		for i, t := range topics {
			if i%8 == g || (i+1)%8 == g {
				reg.Topics = append(reg.Topics, wire.TopicConfig{Name: t, ReadQueues: 8, WriteQueues: 8, Perm: 6})
			}
		}
		if _, err := tn.Registry().Register(toRegistration(reg)); err != nil {
			b.Fatal(err)
		}
	}
	return tn, topics
}

// BenchmarkRouteRead measures one single-topic route read over real QUIC on
// loopback, both sides in this process (allocs/op counts client and node),
// on a long-lived stream and on a stream per request.
func BenchmarkRouteRead(b *testing.B) {
	tn, topics := benchRouteNode(b)
	c := tn.dial(pki.RoleClient)
	reqs := make([]wire.GetRoutes, len(topics))
	for i, t := range topics {
		reqs[i] = wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: t}}}
	}
	run := func(b *testing.B, call func(ctx context.Context, t wire.Type, req, resp any) error) {
		ctx := context.Background()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			var out wire.Routes
			if err := call(ctx, wire.TypeGetRoutes, &reqs[i%len(reqs)], &out); err != nil || len(out.Results) != 1 {
				b.Fatal(err)
			}
			i++
		}
	}
	b.Run("long-stream", func(b *testing.B) {
		st, err := c.OpenStream(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		run(b, st.Call)
	})
	b.Run("stream-per-request", func(b *testing.B) { run(b, c.CallOnce) })
	// refresh-100: 100 topics the client holds, all "not modified".
	b.Run("refresh-100", func(b *testing.B) {
		var held wire.Routes
		q := wire.GetRoutes{Topics: make([]wire.TopicVersion, 100)}
		for i := range q.Topics {
			q.Topics[i].Topic = topics[i]
		}
		if err := c.Call(context.Background(), wire.TypeGetRoutes, &q, &held); err != nil {
			b.Fatal(err)
		}
		for i, r := range held.Results {
			q.Topics[i].Version = r.Version
		}
		st, err := c.OpenStream(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		b.ReportAllocs()
		for b.Loop() {
			var out wire.Routes
			if err := st.Call(context.Background(), wire.TypeGetRoutes, &q, &out); err != nil || len(out.Results) != 100 || out.Results[99].Status != wire.StatusNotModified {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHandleRefresh measures a node's own work for a poll of 100
// topics the client holds, all not modified, to the encoded response in a
// reused buffer, without the network.
func BenchmarkHandleRefresh(b *testing.B) {
	tn, topics := benchRouteNode(b)
	q := wire.GetRoutes{Topics: make([]wire.TopicVersion, 100)}
	for i := range q.Topics {
		e, err := tn.Registry().Route(topics[i])
		if err != nil {
			b.Fatal(err)
		}
		q.Topics[i] = wire.TopicVersion{Topic: topics[i], Version: e.Version}
	}
	f, err := wire.NewRequest(wire.TypeGetRoutes, 1, &q)
	if err != nil {
		b.Fatal(err)
	}
	cs := &connState{peer: peer{Identity: pki.Identity{Role: pki.RoleClient}}}
	var watch *watcher
	w := &streamWriter{} // as in BenchmarkHandleGetRoutes
	b.ReportAllocs()
	for b.Loop() {
		resp := tn.handle(cs, f, w, &watch)
		if resp.Error != nil {
			b.Fatal(resp.Error)
		}
		if w.buf, err = appendAnswer(w.buf[:0], &resp); err != nil {
			b.Fatal(err)
		}
		w.keepRouteSet(resp.set)
	}
}
