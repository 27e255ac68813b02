package node

import (
	"fmt"
	"testing"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// BenchmarkHandleGetRoutes measures a node's own work for one single-topic
// route read, from a decoded frame to the encoded response frame, without
// the network.
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
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		resp := tn.handle(cs, frames[i%len(frames)], nil, &watch)
		if _, err := wire.AppendFrame(nil, resp); err != nil || resp.Error != nil {
			b.Fatal(err, resp.Error)
		}
		i++
	}
}
