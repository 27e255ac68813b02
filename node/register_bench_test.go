package node

import (
	"fmt"
	"testing"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// BenchmarkHandleRegister measures a node's own work for a broker's
// re-sent full registration of 100 topics (a new data version, the same
// topics: edgereg bench register), from the frame's bytes to the encoded
// response frame, without the network.
func BenchmarkHandleRegister(b *testing.B) {
	tn := startNode(b, nil)
	cs := &connState{peer: peer{Identity: pki.Identity{Role: pki.RoleOperator}}}
	var frames [][]byte
	for v := range 64 {
		reg := registration("c1", "bench-broker-0001", 0, "10.1.0.1:10911")
		reg.HAAddr, reg.DataVersion.Counter = "10.1.0.1:10912", uint64(v+1)
		for t := range 100 {
			reg.Topics = append(reg.Topics, wire.TopicConfig{Name: fmt.Sprintf("bench_topic_0001_%03d", t), ReadQueues: 8, WriteQueues: 8, Perm: 6})
		}
		frames = append(frames, benchFrameBytes(b, wire.TypeRegister, reg))
	}
	benchHandle(b, tn, cs, frames)
}

// BenchmarkHandleHeartbeat measures the same for a heartbeat.
func BenchmarkHandleHeartbeat(b *testing.B) {
	tn := startNode(b, nil)
	cs := &connState{peer: peer{Identity: pki.Identity{Role: pki.RoleOperator}}}
	reg := registration("c1", "bench-broker-0001", 0, "10.1.0.1:10911", "t")
	res, err := tn.Registry().Register(toRegistration(reg))
	if err != nil {
		b.Fatal(err)
	}
	hb := &wire.Heartbeat{Cluster: reg.Cluster, Addr: reg.Addr, Epoch: res.Epoch, DataVersion: reg.DataVersion}
	benchHandle(b, tn, cs, [][]byte{benchFrameBytes(b, wire.TypeHeartbeat, hb)})
}

func benchFrameBytes(b *testing.B, t wire.Type, body any) []byte {
	f, err := wire.NewRequest(t, 1, body)
	if err != nil {
		b.Fatal(err)
	}
	buf, err := wire.AppendFrame(nil, f)
	if err != nil {
		b.Fatal(err)
	}
	return buf[wire.FrameHeaderLen:]
}

// benchHandle decodes each frame, handles it and encodes the answer into
// one buffer, as a stream's writer does, in turn.
func benchHandle(b *testing.B, tn *testNode, cs *connState, frames [][]byte) {
	var watch *watcher
	var buf []byte
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		var f wire.Frame
		if err := wire.DecodeFrame(frames[i%len(frames)], &f); err != nil {
			b.Fatal(err)
		}
		resp := tn.handle(cs, &f, nil, &watch)
		var err error
		if buf, err = appendAnswer(buf[:0], &resp); err != nil || resp.Error != nil {
			b.Fatal(err, resp.Error)
		}
		i++
	}
}
