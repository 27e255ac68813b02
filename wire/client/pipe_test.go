package client

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/edgereg/edgereg/wire"
)

// TestKeepFrame: a frame kept past the read buffer decodes as the buffer
// itself does, shares nothing with it, and a small one (a route event)
// costs one allocation.
func TestKeepFrame(t *testing.T) {
	for _, size := range []int{0, 100, smallFrameLen - 16, smallFrameLen - 15, smallFrameLen, 4096} {
		body, err := wire.Marshal(wire.RouteEvent{Result: wire.RouteResult{Topic: strings.Repeat("t", size+1), Status: wire.StatusNotFound, Version: 7}})
		if err != nil {
			t.Fatal(err)
		}
		framed, err := wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeRouteEvent, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		b := bytes.Clone(framed[wire.FrameHeaderLen:])
		var want wire.Frame
		if err := wire.DecodeFrame(bytes.Clone(b), &want); err != nil {
			t.Fatal(err)
		}
		got, err := keepFrame(b)
		if err != nil {
			t.Fatalf("%d bytes: %v", len(b), err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("%d bytes: kept %+v, want %+v", len(b), *got, want)
		}
		clear(b) // the read buffer is reused for the next frame
		if !bytes.Equal(got.Body, want.Body) {
			t.Fatalf("%d bytes: the kept body changed with the read buffer", len(b))
		}
		if len(b) <= smallFrameLen {
			b := framed[wire.FrameHeaderLen:]
			if n := testing.AllocsPerRun(100, func() { keepFrame(b) }); n != 1 {
				t.Errorf("%d bytes: %v allocations, want 1", len(b), n)
			}
		}
	}
	if _, err := keepFrame([]byte{0xff}); err == nil {
		t.Error("a broken frame was kept")
	}
}
