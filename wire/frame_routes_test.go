package wire

import (
	"reflect"
	"sync"
	"testing"
)

// sharedChecks are route checks every compareRoutesFrame adds to, so that
// a fuzzed route's version meets routes of other bytes remembered for it.
var (
	sharedChecksMu sync.Mutex
	sharedChecks   RouteChecks
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
	if !DecodeRoutesFrame(b, want, &f, &r, nil) {
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
	// With the routes checked before: the same frame twice with checks of
	// its own (the second skips the walks), and with checks shared by
	// every input so far, whose versions may name other bytes.
	var checks RouteChecks
	for range 2 {
		var r2 Routes
		if !DecodeRoutesFrame(b, want, &Frame{}, &r2, &checks) || !reflect.DeepEqual(r2, wantR) {
			t.Fatalf("%x: DecodeRoutesFrame with checks %#v, want %#v", b, r2, wantR)
		}
	}
	sharedChecksMu.Lock()
	var r3 Routes
	took3 := DecodeRoutesFrame(b, want, &Frame{}, &r3, &sharedChecks)
	sharedChecksMu.Unlock()
	if !took3 || !reflect.DeepEqual(r3, wantR) {
		t.Fatalf("%x: DecodeRoutesFrame with shared checks %#v, want %#v", b, r3, wantR)
	}
	used := Routes{Results: make([]RouteResult, 2, 8), Groups: make([]GroupFreshness, 1, 8), Node: NodeState{NodeID: "old"}}
	used.Results[0].Topic, used.Groups[0].BrokerName = "old", "old"
	if !DecodeRoutesFrame(b, want, &Frame{}, &used, nil) || !reflect.DeepEqual(used, wantR) {
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
		if DecodeRoutesFrame(b, ^uint64(0), &f, &Routes{}, nil) {
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
		if DecodeRoutesFrame(b, 1, &Frame{}, &Routes{}, nil) {
			t.Errorf("%s: %x taken", name, b)
		}
	}
}

// TestRouteChecks: a route remembered for a version is taken for it only
// where the bytes begin with it; other bytes under the same version, a
// longer route that starts like it, or a broken one are walked (and a
// broken one declined) as without checks.
func TestRouteChecks(t *testing.T) {
	route := func(name string) []byte {
		b, err := Marshal(&Route{Queues: []QueueData{{BrokerName: name, ReadQueues: 8}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	answer := func(version uint64, rt []byte) []byte {
		return AppendRoutes(nil, &Routes{Results: []RouteResult{{Topic: "t", Version: version, Route: rt}}})
	}
	var checks RouteChecks
	a, b := route("a"), route("bb")
	for _, rt := range [][]byte{a, b, a, b} { // b under a's version, and back
		var r Routes
		if !decodeRoutesChecked(answer(7, rt), &r, &checks) || string(r.Results[0].Route) != string(rt) {
			t.Fatalf("route %x under a remembered version: %x", rt, r.Results[0].Route)
		}
	}
	if n := checks.known(7, b); n != len(b) {
		t.Fatalf("the last route walked is not remembered: %d", n)
	}
	broken := answer(7, b)
	broken[len(broken)-2] = 0xff // inside the remembered route's last string
	if decodeRoutesChecked(broken, &Routes{}, &checks) {
		t.Fatal("a broken route under a remembered version was taken")
	}
	if decodeRoutesFast(broken, &Routes{}) {
		t.Fatal("the test's broken route is not broken")
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

// BenchmarkDecodeRoutesFrame decodes whole answer frames of one route,
// alternating between two topics into one Routes, as a client's route
// reads do: without RouteChecks and with them.
func BenchmarkDecodeRoutesFrame(b *testing.B) {
	var frames [2][]byte
	for i, body := range twoTopicAnswers(b) {
		fb, err := AppendFrame(nil, &Frame{Type: TypeGetRoutes, ID: 1, Body: body})
		if err != nil {
			b.Fatal(err)
		}
		frames[i] = fb[FrameHeaderLen:]
	}
	for _, c := range []struct {
		name   string
		checks *RouteChecks
	}{{"unchecked", nil}, {"checks", new(RouteChecks)}} {
		b.Run(c.name, func(b *testing.B) {
			var r Routes
			var f Frame
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if !DecodeRoutesFrame(frames[i%2], 1, &f, &r, c.checks) {
					b.Fatal("not taken")
				}
				i++
			}
		})
	}
}
