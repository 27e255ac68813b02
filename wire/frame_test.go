package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// TestReadBodyGrowsWithBytes: the buffer for a body follows the bytes that
// arrived, whatever length the header declared.
func TestReadBodyGrowsWithBytes(t *testing.T) {
	const declared = 1 << 20
	sent := bytes.Repeat([]byte{0xa0}, 3000)
	reserved := 0
	_, err := ReadBody(iotest.OneByteReader(bytes.NewReader(sent)), declared, func(k int) error {
		reserved += k
		return nil
	})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	if reserved > 2*len(sent)+firstBodyChunk {
		t.Fatalf("reserved %d bytes for %d received (declared %d)", reserved, len(sent), declared)
	}

	body := bytes.Repeat([]byte{1}, 100_000)
	got, err := ReadBody(iotest.HalfReader(bytes.NewReader(body)), len(body), nil)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("ReadBody of a whole body: %d bytes, %v", len(got), err)
	}
}

func TestReadBodyRefusedReservation(t *testing.T) {
	refused := errors.New("over budget")
	calls := 0
	_, err := ReadBody(bytes.NewReader(make([]byte, 10_000)), 10_000, func(int) error {
		if calls++; calls > 2 {
			return refused
		}
		return nil
	})
	if !errors.Is(err, refused) {
		t.Fatalf("err = %v, want the reservation's error", err)
	}
}
