package client

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/edgereg/edgereg/wire"
)

// TestFrameReaderMatchesReadFrameBytes: the stream's reusable frame reader
// returns the frames and the errors wire.ReadFrameBytes returns, however
// the stream's bytes are split across reads.
func TestFrameReaderMatchesReadFrameBytes(t *testing.T) {
	frame := func(n int) []byte {
		body, err := wire.Marshal(bytes.Repeat([]byte{'x'}, n))
		if err != nil {
			t.Fatal(err)
		}
		f, err := wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeGetRoutes, ID: uint64(n), Body: body})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	var many []byte
	for _, n := range []int{0, 1, 500, 508, 509, 2000, 70000, 3} {
		many = append(many, frame(n)...)
	}
	streams := map[string][]byte{
		"frames":           many,
		"clean end":        frame(1),
		"empty":            nil,
		"cut header":       append(frame(1), 0, 0),
		"cut body":         append(frame(1), frame(600)[:300]...),
		"empty frame":      append(frame(1), 0, 0, 0, 0),
		"too large":        append(frame(1), 0x00, 0x10, 0x00, 0x01),
		"declared, unsent": append(frame(1), 0x00, 0x0f, 0xff, 0xff, 0xa1),
	}
	readers := map[string]func([]byte) io.Reader{
		"whole":    func(b []byte) io.Reader { return bytes.NewReader(b) },
		"one byte": func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
		"halves":   func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) },
		"data+EOF": func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) },
	}
	const limit = 1 << 20
	for sname, stream := range streams {
		for rname, reader := range readers {
			want, got := reader(stream), reader(stream)
			var fr frameReader
			for i := 0; ; i++ {
				wb, werr := wire.ReadFrameBytes(want, limit)
				gb, gerr := fr.next(got, limit)
				if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() || !bytes.Equal(wb, gb) {
					t.Fatalf("%s, %s, frame %d: next %x, %v; ReadFrameBytes %x, %v", sname, rname, i, gb, gerr, wb, werr)
				}
				if werr != nil {
					if errors.Is(werr, wire.ErrFrameTooLarge) && cap(fr.buf) > 2*firstChunk {
						t.Errorf("%s, %s: a refused frame grew the buffer to %d", sname, rname, cap(fr.buf))
					}
					break
				}
			}
			if sname == "declared, unsent" && cap(fr.buf) > 2*firstChunk {
				t.Errorf("%s: a frame declared at 1 MiB with one byte sent grew the buffer to %d", rname, cap(fr.buf))
			}
		}
	}
}

// TestFrameReaderLetsGoOfLargeBuffers: a buffer grown for a large frame
// is not kept for the frames after it.
func TestFrameReaderLetsGoOfLargeBuffers(t *testing.T) {
	body, _ := wire.Marshal(make([]byte, 2*keepBuffer))
	big, _ := wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeClusterInfo, ID: 1, Body: body})
	small, _ := wire.AppendFrame(nil, &wire.Frame{Type: wire.TypePing, ID: 2})
	r := bytes.NewReader(append(big, small...))
	var fr frameReader
	if _, err := fr.next(r, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := fr.next(r, 1<<20); err != nil {
		t.Fatal(err)
	}
	if cap(fr.buf) > keepBuffer {
		t.Errorf("after a %d-byte frame and a small one the reader keeps %d bytes", len(big), cap(fr.buf))
	}
}
