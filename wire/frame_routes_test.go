package wire

import (
	"reflect"
	"testing"
)

// routesFrameInputs are whole frames answering a get-routes, as a node
// encodes them, for the seeds of FuzzDecodeRoutesFrame.
func routesFrameInputs(tb testing.TB) [][]byte {
	var out [][]byte
	for i, body := range routesInputs(tb, false) {
		b, err := AppendFrame(nil, &Frame{Type: TypeGetRoutes, ID: uint64(i % 3), Body: body})
		if err != nil {
			continue // not one well-formed item: no frame of a node carries it
		}
		out = append(out, b[FrameHeaderLen:])
	}
	return out
}

// compareRoutesFrame checks DecodeRoutesFrame against DecodeFrame and
// Frame.DecodeRoutes on b: when it takes b, those take it too and give
// the same frame and the same routes, into a fresh Routes and into a used
// one.
func compareRoutesFrame(t testing.TB, b []byte, want uint64) (took bool) {
	t.Helper()
	var f, wantF Frame
	var r, wantR Routes
	if !DecodeRoutesFrame(b, want, &f, &r) {
		return false
	}
	if err := DecodeFrame(b, &wantF); err != nil {
		t.Fatalf("%x: DecodeRoutesFrame took a frame DecodeFrame refuses: %v", b, err)
	}
	if err := wantF.DecodeRoutes(&wantR); err != nil {
		t.Fatalf("%x: DecodeRoutesFrame took a body DecodeRoutes refuses: %v", b, err)
	}
	if !reflect.DeepEqual(f, wantF) || wantF.ID != want || !reflect.DeepEqual(r, wantR) {
		t.Fatalf("%x: DecodeRoutesFrame %#v %#v, DecodeFrame and DecodeRoutes %#v %#v", b, f, r, wantF, wantR)
	}
	used := Routes{Results: make([]RouteResult, 2, 8), Groups: make([]GroupFreshness, 1, 8), Node: NodeState{NodeID: "old"}}
	used.Results[0].Topic, used.Groups[0].BrokerName = "old", "old"
	if !DecodeRoutesFrame(b, want, &Frame{}, &used) || !reflect.DeepEqual(used, wantR) {
		t.Fatalf("%x: DecodeRoutesFrame into a used Routes %#v, want %#v", b, used, wantR)
	}
	return true
}

// TestDecodeRoutesFrame: the frames a node answers with are taken and
// decoded as DecodeFrame and DecodeRoutes decode them; a frame for
// another request, one with more or fewer keys, keys in another order or
// trailing bytes is left to them.
func TestDecodeRoutesFrame(t *testing.T) {
	took := 0
	for _, b := range routesFrameInputs(t) {
		var f Frame
		if DecodeRoutesFrame(b, ^uint64(0), &f, &Routes{}) {
			t.Errorf("%x: taken for another request's id", b)
		}
		for id := range uint64(3) {
			if compareRoutesFrame(t, b, id) {
				took++
			}
		}
	}
	if took == 0 {
		t.Fatal("no node's answer was taken")
	}
	body := AppendRoutes(nil, &Routes{Results: []RouteResult{{Topic: "a", Status: StatusNotFound}}})
	frame := func(pairs ...[]byte) []byte {
		b := []byte{0xa0 | byte(len(pairs)/2)}
		for _, p := range pairs {
			b = append(b, p...)
		}
		return b
	}
	k := func(v byte) []byte { return []byte{v} }
	good := frame(k(1), k(5), k(2), k(1), k(3), body)
	if !compareRoutesFrame(t, good, 1) {
		t.Fatalf("%x: a node's answer not taken", good)
	}
	for name, b := range map[string][]byte{
		"no type":        frame(k(2), k(1), k(3), body),
		"keys reordered": frame(k(2), k(1), k(1), k(5), k(3), body),
		"error key":      frame(k(1), k(5), k(2), k(1), k(4), body),
		"trailing byte":  append(frame(k(1), k(5), k(2), k(1), k(3), body), 0),
		"not routes":     frame(k(1), k(5), k(2), k(1), k(3), k(0x01)),
		"truncated":      good[:len(good)-1],
	} {
		if DecodeRoutesFrame(b, 1, &Frame{}, &Routes{}) {
			t.Errorf("%s: %x taken", name, b)
		}
	}
}

// FuzzDecodeRoutesFrame compares DecodeRoutesFrame with DecodeFrame and
// Frame.DecodeRoutes, seeded with whole answers a node sends.
func FuzzDecodeRoutesFrame(f *testing.F) {
	for _, b := range routesFrameInputs(f) {
		f.Add(b, uint64(0))
		f.Add(b, uint64(1))
	}
	f.Fuzz(func(t *testing.T, b []byte, want uint64) { compareRoutesFrame(t, b, want) })
}
