package node

// Tests of an independent tester writing a client from wire/PROTOCOL.md
// alone: raw quic-go streams and hand-built CBOR frames.

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// manyLabelsWatch is a watch frame of one topic whose ClientAttrs carry n
// distinct labels ("l<i>" -> ""): a few bytes each on the wire.
func manyLabelsWatch(t *testing.T, id uint64, n int) []byte {
	t.Helper()
	body := []byte{0xa2, 0x01, 0x81, 0xa1, 0x01, 0x61, 0x61, 0x02, 0xa1, 0x02, 0xba}
	body = binary.BigEndian.AppendUint32(body, uint32(n))
	for i := range n {
		k := fmt.Sprintf("l%x", i)
		body = append(body, 0x60+byte(len(k)))
		body = append(body, k...)
		body = append(body, 0x60)
	}
	frame, err := wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeWatch, ID: id, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// TestOversizedClientAttrsNotKeptByWatches: ClientAttrs are never refused
// (PROTOCOL.md 7.9); over their caps (16 labels, 256 bytes) a read is
// answered by the route fail mode. A watch whose attrs had a few hundred
// thousand labels in a 1 MiB frame was decoded into a Go map many times
// the bytes received, and the watch stream kept that map for as long as
// it lived: memory that follows what a client declares, held by every
// stream of every connection.
func TestOversizedClientAttrsNotKeptByWatches(t *testing.T) {
	tn := startNode(t, nil)
	qc, err := quic.DialAddr(ctxT(t), tn.Addr().String(), tn.tlsFor(pki.RoleClient, "labels"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	const streams = 8
	sent := 0
	before := liveHeap()
	var keep []*quic.Stream
	for i := range streams {
		frame := manyLabelsWatch(t, uint64(i+1), 1<<20/8)
		sent += len(frame)
		s, err := qc.OpenStreamSync(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, s)
		s.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := s.Write(frame); err != nil {
			t.Fatal(err)
		}
		f, err := wire.ReadFrame(s, wire.MaxFrameLen)
		if err != nil {
			t.Fatal(err)
		}
		if f.Error != nil || f.ID != uint64(i+1) {
			t.Fatalf("watch %d: %+v", i+1, f.Error)
		}
	}
	grew := int64(liveHeap()) - int64(before)
	t.Logf("%d watches of %d KiB in all: live heap grew %d KiB", streams, sent>>10, grew>>10)
	// The streams' own buffers and QUIC's: well under the bytes sent.
	if limit := int64(sent); grew > limit {
		t.Errorf("%d open watch streams whose frames were %d KiB hold %d KiB", streams, sent>>10, grew>>10)
	}
	runtime.KeepAlive(keep)
}
