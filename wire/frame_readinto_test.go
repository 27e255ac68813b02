package wire

import (
	"bytes"
	"slices"
	"testing"
	"testing/iotest"
)

// TestReadBodyInto: a body read into a buffer with room lands in that
// buffer's memory, one too large for it in a new one; either way the
// bytes are the body's and reserve is called exactly as ReadBody calls it,
// so a kept buffer never lets a peer hold budget for bytes it has not sent.
func TestReadBodyInto(t *testing.T) {
	for _, size := range []int{1, 300, firstBodyChunk, 5000} {
		body := bytes.Repeat([]byte{7}, size)
		var want, got []int
		if _, err := ReadBody(iotest.HalfReader(bytes.NewReader(body)), size, func(k int) error { want = append(want, k); return nil }); err != nil {
			t.Fatal(err)
		}
		kept := make([]byte, 17, 1024)
		b, err := ReadBodyInto(kept, iotest.HalfReader(bytes.NewReader(body)), size, func(k int) error { got = append(got, k); return nil })
		if err != nil || !bytes.Equal(b, body) {
			t.Fatalf("size %d: read %d bytes, %v", size, len(b), err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("size %d: reserved %v, ReadBody reserves %v", size, got, want)
		}
		if reused := &b[0] == &kept[:1][0]; reused != (size <= cap(kept)) {
			t.Errorf("size %d: body in the kept buffer: %v", size, reused)
		}
	}
}
