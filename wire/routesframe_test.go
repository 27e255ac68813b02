package wire

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// TestAppendRoutesFrame checks the one-pass get-routes response frame
// against AppendFrame of the same body, for the vectors' Routes and every
// shape of frame header (ID absent, each integer width).
func TestAppendRoutesFrame(t *testing.T) {
	var cases []*Routes
	for _, r := range decodedVectors[Routes](t, "Routes") {
		cases = append(cases, &r)
	}
	cases = append(cases, &Routes{}, &Routes{Results: make([]RouteResult, 300)})
	for i, r := range cases {
		for _, id := range []uint64{0, 1, 23, 24, 255, 256, 1 << 20, 1 << 40, math.MaxUint64} {
			for _, typ := range []Type{TypeGetRoutes, TypeWatch, 999} {
				checkRoutesFrame(t, typ, id, r, i)
			}
		}
	}
}

func checkRoutesFrame(t *testing.T, typ Type, id uint64, r *Routes, i int) {
	t.Helper()
	want, err := AppendFrame(nil, &Frame{Type: typ, ID: id, Body: AppendRoutes(nil, r)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := AppendRoutesFrame([]byte{0xee}, typ, id, r)
	if err != nil || got[0] != 0xee || !bytes.Equal(got[1:], want) {
		t.Fatalf("case %d type %d id %d: AppendRoutesFrame\n%x, %v\nAppendFrame\n%x", i, typ, id, got, err, want)
	}
	var f Frame
	if err := DecodeFrame(got[1+FrameHeaderLen:], &f); err != nil || f.Type != typ || f.ID != id {
		t.Fatalf("case %d: the frame does not decode back: %+v, %v", i, f, err)
	}
}

// TestAppendRoutesFrameTooLarge: a response over MaxFrameLen is refused
// as AppendFrame refuses it, and dst is left as it was.
func TestAppendRoutesFrameTooLarge(t *testing.T) {
	big := &Routes{Results: []RouteResult{{Topic: "t", Status: StatusOK, Version: 1, Route: make([]byte, MaxFrameLen)}}}
	big.Results[0].Route[0] = 0x40 // not valid as a whole, but size is checked, not content
	got, err := AppendRoutesFrame([]byte{1, 2}, TypeGetRoutes, 7, big)
	var tooLarge *FrameTooLargeError
	if !errors.As(err, &tooLarge) || !bytes.Equal(got, []byte{1, 2}) {
		t.Fatalf("oversized response: %d bytes, %v", len(got), err)
	}
}

// FuzzAppendRoutesFrame compares the one-pass frame with AppendFrame for
// any Routes the reflection decoder makes of the input.
func FuzzAppendRoutesFrame(f *testing.F) {
	for _, lv := range loadVectors(f) {
		if lv.file.Type == "Routes" {
			f.Add(lv.cbor, uint64(1))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, id uint64) {
		var r Routes
		if Unmarshal(body, &r) != nil {
			return
		}
		checkRoutesFrame(t, TypeGetRoutes, id, &r, 0)
	})
}
