package node

import (
	"fmt"
	"io"
	"testing"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// TestFramesInPieces: a stream server reads its stream ahead of the frame
// it needs (frameBuffer). Requests written back to back and cut into
// pieces of every size, prefixes split, several frames in one write, a
// body far past the read-ahead buffer, are all answered, in order, each
// as itself; and a stream that ends inside a frame's prefix gets no
// answer for it.
func TestFramesInPieces(t *testing.T) {
	tn := startNode(t, nil)
	op := tn.dial(pki.RoleOperator)
	if _, err := op.Register(ctxT(t), registration("c1", "b1", 0, "10.0.0.1:1", "t")); err != nil {
		t.Fatal(err)
	}
	var many []wire.TopicVersion // a body of about 3 KB, past readAhead
	for i := range 120 {
		many = append(many, wire.TopicVersion{Topic: fmt.Sprintf("topic_with_a_long_name_%04d", i)})
	}
	var stream []byte
	var want []int // topics asked per request, 0 for a ping
	for id := uint64(1); id <= 40; id++ {
		var err error
		switch id % 4 {
		case 0:
			stream, err = wire.AppendRequest(stream, wire.TypePing, id, nil)
			want = append(want, 0)
		case 1:
			stream, err = wire.AppendRequest(stream, wire.TypeGetRoutes, id, &wire.GetRoutes{Topics: many})
			want = append(want, len(many))
		default:
			stream, err = wire.AppendRequest(stream, wire.TypeGetRoutes, id, &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "t"}}})
			want = append(want, 1)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(stream) < 4*readAhead {
		t.Fatalf("the requests take %d bytes, not past the read-ahead buffer", len(stream))
	}
	for _, piece := range []int{1, 3, 5, readAhead - 1, readAhead + 7, len(stream)} {
		s := rawStream(t, tn, pki.RoleClient)
		go func() {
			for rest := stream; len(rest) > 0; {
				k := min(piece, len(rest))
				if _, err := s.Write(rest[:k]); err != nil {
					return
				}
				rest = rest[k:]
			}
			s.Close()
		}()
		for i, topics := range want {
			f, err := wire.ReadFrame(s, wire.MaxFrameLen)
			if err != nil {
				t.Fatalf("pieces of %d: answer %d: %v", piece, i+1, err)
			}
			if f.ID != uint64(i+1) || f.Error != nil {
				t.Fatalf("pieces of %d: answer %d is %+v", piece, i+1, f)
			}
			if topics > 0 {
				var r wire.Routes
				if err := f.DecodeRoutes(&r); err != nil || len(r.Results) != topics || r.Results[0].Topic != wantTopic(topics) {
					t.Fatalf("pieces of %d: answer %d: %d results (%v), want %d", piece, i+1, len(r.Results), err, topics)
				}
			}
		}
		if _, err := wire.ReadFrame(s, wire.MaxFrameLen); err != io.EOF {
			t.Fatalf("pieces of %d: after the answers: %v, want the node's FIN", piece, err)
		}
	}

	s := rawStream(t, tn, pki.RoleClient)
	s.Write([]byte{0, 0}) // half a length prefix, then the end
	s.Close()
	if b, err := io.ReadAll(s); len(b) != 0 {
		t.Fatalf("a stream ended inside a prefix got %x, %v", b, err)
	}
}

func wantTopic(topics int) string {
	if topics == 1 {
		return "t"
	}
	return "topic_with_a_long_name_0000"
}
