package wire

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestAppendRoutes checks the hand-written get-routes response encoder
// against the reflective one, on every Routes test vector and on random
// results covering each field's shortest-integer and length boundaries.
func TestAppendRoutes(t *testing.T) {
	check := func(name string, r *Routes) {
		t.Helper()
		want, err := Marshal(r)
		if err != nil {
			t.Fatalf("%s: Marshal: %v", name, err)
		}
		if got := AppendRoutes(nil, r); !bytes.Equal(got, want) {
			t.Errorf("%s: AppendRoutes\n%x\nMarshal\n%x", name, got, want)
		}
		// Appends to what dst holds.
		if got := AppendRoutes([]byte{0xff}, r); !bytes.Equal(got[1:], want) || got[0] != 0xff {
			t.Errorf("%s: AppendRoutes does not append", name)
		}
	}
	vectors := 0
	for _, lv := range loadVectors(t) {
		var r Routes
		if lv.file.Type == "Routes" {
			if err := Unmarshal(lv.cbor, &r); err != nil {
				t.Fatal(err)
			}
			vectors++
			check(lv.name, &r)
			if !bytes.Equal(AppendRoutes(nil, &r), lv.cbor) {
				t.Errorf("%s: AppendRoutes differs from the vector", lv.name)
			}
		}
	}
	if vectors == 0 {
		t.Fatal("no Routes vectors")
	}
	check("nil results", &Routes{})
	check("empty results", &Routes{Results: []RouteResult{}})
	for _, v := range []int64{0, 1, -1, 23, 24, -24, -25, 1 << 40, -(1 << 40), math.MaxInt64, math.MinInt64} {
		check(fmt.Sprintf("freshness %d", v), &Routes{
			Groups: []GroupFreshness{{BrokerName: "a", AgeMs: v, DeadlineInMs: -v}, {BrokerName: "b", DeadlineInMs: v}},
			Node:   NodeState{NodeID: "n1", StartedMs: v, WarmingUp: v%2 != 0},
		})
		check(fmt.Sprintf("node only %d", v), &Routes{Node: NodeState{StartedMs: v}})
	}
	check("warming only", &Routes{Node: NodeState{WarmingUp: true}})

	route, err := Marshal(&Route{Queues: []QueueData{{BrokerName: "b", ReadQueues: 8, WriteQueues: 8, Perm: 6}}})
	if err != nil {
		t.Fatal(err)
	}
	ints := []uint64{0, 1, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<64 - 1}
	lens := []int{0, 1, 23, 24, 255, 256, 70000}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		r := &Routes{Results: make([]RouteResult, rng.IntN(30))}
		if i == 0 {
			r.Results = make([]RouteResult, 300) // an array head over 255
		}
		for k := range r.Results {
			res := &r.Results[k]
			res.Topic = strings.Repeat("t", lens[rng.IntN(len(lens))])
			res.Status = RouteStatus(rng.IntN(4))
			res.Version = ints[rng.IntN(len(ints))]
			if rng.IntN(2) == 0 {
				res.Route = route
			}
		}
		check("random", r)
	}
}

func BenchmarkEncodeRoutes(b *testing.B) {
	route, _ := Marshal(&Route{Queues: []QueueData{{BrokerName: "broker-a", ReadQueues: 8, WriteQueues: 8, Perm: 6},
		{BrokerName: "broker-b", ReadQueues: 8, WriteQueues: 8, Perm: 6}},
		Brokers: []BrokerData{{Cluster: "c", Name: "broker-a", Addrs: map[int64]string{0: "10.0.0.1:10911"}}}})
	r := &Routes{Results: []RouteResult{{Topic: "rmq_bench_topic_0001", Version: 0x64d1aefc40534f4d, Route: route}}}
	b.Run("Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendRoutes", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf = AppendRoutes(buf[:0], r)
		}
	})
}

// getRoutesInputs are encoded get-routes bodies for the decoder tests: the
// vectors, their truncations and one-byte mutations, and odd shapes.
func getRoutesInputs(t testing.TB) [][]byte {
	in := vectorBodies(t, "GetRoutes")
	for _, q := range []GetRoutes{
		{Topics: []TopicVersion{{Topic: "a"}}},
		{Topics: []TopicVersion{{Topic: "a", Version: 1 << 40}, {Topic: strings.Repeat("x", 300), Version: 7}}},
		{Topics: []TopicVersion{}},
		{Topics: []TopicVersion{{Topic: "a"}}, Client: ClientAttrs{Zone: "z"}},
	} {
		b, err := Marshal(&q)
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, b)
	}
	in = append(in,
		[]byte{0xa1, 0x01, 0x81, 0xa1, 0x01, 0x62, 0xff, 0xfe},                   // invalid UTF-8
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x01, 0x61, 0x62},       // duplicate key
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x02, 0x01, 0x01, 0x61, 0x61},             // keys out of order
		[]byte{0xa1, 0x01, 0x81, 0xa1, 0x01, 0x7f, 0x61, 0x61, 0xff},             // indefinite text
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x02, 0x20},             // negative version
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x02, 0x18, 0x05},       // long-form integer
		[]byte{0xa1, 0x01, 0x9a, 0xff, 0xff, 0xff, 0xff},                         // huge declared array
		[]byte{0xa1, 0x01, 0x81, 0xa1, 0x01, 0x61, 0x61, 0x00},                   // trailing byte
		[]byte{0xa2, 0x01, 0x80, 0x01, 0x80},                                     // duplicate outer key
		[]byte{0xa1, 0x01, 0x81, 0xa3, 0x01, 0x61, 0x61, 0x02, 0x01, 0x03, 0x01}, // unknown key
	)
	n := len(in)
	for _, b := range in[:n] {
		for k := range b {
			in = append(in, b[:k])
			for _, x := range []byte{0x00, 0x01, 0x18, 0x1f, 0x20, 0x61, 0x7f, 0x80, 0xa2, 0xff} {
				m := bytes.Clone(b)
				m[k] = x
				in = append(in, m)
			}
		}
	}
	return in
}

// TestDecodeGetRoutes: the fast decoder gives what the general one gives,
// value and error, on every input.
func TestDecodeGetRoutes(t *testing.T) {
	fast := 0
	for _, b := range getRoutesInputs(t) {
		if compareGetRoutesDecoders(t, b) {
			fast++
		}
	}
	if fast == 0 {
		t.Error("the fast path never ran")
	}
}

func compareGetRoutesDecoders(t testing.TB, b []byte) (fastPath bool) {
	t.Helper()
	f := &Frame{Type: TypeGetRoutes, Body: b}
	var want, got GetRoutes
	wantErr := f.DecodeBody(&want)
	gotErr := f.DecodeGetRoutes(&got)
	if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
		t.Fatalf("%x: DecodeGetRoutes error %v, DecodeBody error %v", b, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%x: DecodeGetRoutes %#v, DecodeBody %#v", b, got, want)
	}
	var q GetRoutes
	return len(b) > 0 && decodeGetRoutesFast(b, &q)
}

func FuzzDecodeGetRoutes(f *testing.F) {
	for _, b := range getRoutesInputs(f)[:20] {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { compareGetRoutesDecoders(t, b) })
}

// routesInputs are encoded get-routes answers for the decoder tests: the
// Routes vectors and the Routes in frame vectors, AppendRoutes output of
// every shape a node sends (freshness and node state included), odd
// shapes the fast decoder must leave to the general one, and every
// truncation and many one-byte mutations of them all.
func routesInputs(tb testing.TB, mutate bool) [][]byte {
	var in [][]byte
	for _, lv := range loadVectors(tb) {
		switch {
		case lv.file.Type == "Routes":
			in = append(in, lv.cbor)
		case lv.file.Type == "Frame" && strings.HasPrefix(lv.name, "frame-get-routes-response"):
			var f Frame
			if err := DecodeFrame(lv.cbor[FrameHeaderLen:], &f); err != nil {
				tb.Fatal(err)
			}
			in = append(in, f.Body)
		}
	}
	if len(in) < 3 {
		tb.Fatalf("only %d Routes vectors", len(in))
	}
	route, _ := Marshal(&Route{Queues: []QueueData{{BrokerName: "b", ReadQueues: 8}},
		Brokers: []BrokerData{{Cluster: "c", Name: "b", Zone: "z", Addrs: map[int64]string{0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}}}})
	fresh := []GroupFreshness{{BrokerName: "b", AgeMs: 4200, DeadlineInMs: -11000}, {BrokerName: "c"}}
	node := NodeState{NodeID: "node-1", StartedMs: 1735689000000, WarmingUp: true}
	for _, r := range []Routes{
		{Results: []RouteResult{{Topic: "a", Status: StatusNotModified, Version: 5}}},
		{Results: []RouteResult{{Topic: "a", Status: StatusNotFound}, {Topic: "b", Status: StatusWarmingUp}, {Topic: "c", Version: 1 << 60}}},
		{Results: []RouteResult{{Topic: "a", Version: 5, Route: route}}},
		{Results: []RouteResult{{Topic: "a", Version: 5, Route: route}, {Topic: "b", Version: 6, Route: route}}, Groups: fresh, Node: node},
		{Results: []RouteResult{{Topic: "a", Version: 5, Route: route}}, Groups: fresh[:1], Node: NodeState{NodeID: "n"}},
		{Results: []RouteResult{{Topic: "a", Status: StatusNotModified, Version: 5}}, Groups: fresh, Node: node},
		{Results: []RouteResult{{Topic: "a", Status: StatusPolicyFailed}}, Node: NodeState{StartedMs: -1}},
		{Results: []RouteResult{}},
		{Results: []RouteResult{}, Groups: []GroupFreshness{}},
		{Groups: []GroupFreshness{{AgeMs: math.MaxInt64, DeadlineInMs: math.MinInt64}}},
	} {
		in = append(in, AppendRoutes(nil, &r))
	}
	in = append(in,
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x02, 0x19, 0x01, 0x00},                   // status 256
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x05, 0x01},                               // unknown key
		[]byte{0xa1, 0x01, 0x81, 0xa3, 0x01, 0x61, 0x61, 0x03, 0x01, 0x02, 0x01},                   // out of order
		[]byte{0xa1, 0x01, 0x81, 0xa3, 0x01, 0x61, 0x61, 0x02, 0x01, 0x02, 0x01},                   // duplicate
		[]byte{0xa2, 0x01, 0x80, 0x01, 0x80},                                                       // duplicate outer key
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x04, 0xa2, 0x01, 0x80, 0x18, 0x01, 0x80}, // route: key 1 twice, widths differ
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x04, 0xa1, 0x01, 0xc1, 0x00},             // route: a tag
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x04, 0xa1, 0x01, 0x9f, 0xff},             // route: indefinite array
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x04, 0xa1, 0x01, 0xf9, 0x3c, 0x00},       // route: a float
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x04, 0xa1, 0x61, 0x61, 0x00},             // route: a text key
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x04, 0xa1, 0x01, 0x62, 0xff, 0xfe},       // route: invalid UTF-8
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x04, 0x80},                               // route: an array
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x04, 0xf6},                               // route: null
		[]byte{0xa1, 0x03, 0xa1, 0x03, 0x01},                                                       // warming up: an integer
		[]byte{0xa1, 0x03, 0xa1, 0x02, 0x3b, 0x80, 0, 0, 0, 0, 0, 0, 0},                            // started: int64 overflow
		[]byte{0xa1, 0x02, 0x81, 0xa1, 0x02, 0x1b, 0x80, 0, 0, 0, 0, 0, 0, 0},                      // age: int64 overflow
		[]byte{0xa1, 0x02, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x01, 0x61, 0x62},                         // group: duplicate name
		[]byte{0xa1, 0x01, 0xf6},                         // results: null
		[]byte{0xa1, 0x01, 0x9a, 0xff, 0xff, 0xff, 0xff}, // huge declared array
	)
	// A route nested deeper than the fast decoder follows, and one past
	// the general decoder's limit.
	for _, levels := range []int{maxFastRouteDepth - 3, MaxNestingLevel} {
		deep := []byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x04}
		for range levels {
			deep = append(deep, 0xa1, 0x01)
		}
		in = append(in, append(deep, 0x00))
	}
	if !mutate {
		return in
	}
	n := len(in)
	for _, b := range in[:n] {
		for k := range b {
			in = append(in, b[:k])
			for _, x := range []byte{0x00, 0x01, 0x02, 0x03, 0x04, 0x18, 0x20, 0x3b, 0x61, 0x80, 0xa3, 0xf5, 0xf6, 0xff} {
				m := bytes.Clone(b)
				m[k] = x
				in = append(in, m)
			}
		}
	}
	return in
}

// TestDecodeRoutes: the fast response decoder gives what the general one
// gives, value and error, on every input, into a new Routes and into one
// holding an earlier answer; and it takes every answer a node sends.
func TestDecodeRoutes(t *testing.T) {
	fast := 0
	for _, b := range routesInputs(t, true) {
		if compareRoutesDecoders(t, b) {
			fast++
		}
	}
	if fast == 0 {
		t.Error("the fast path never ran")
	}
	for _, lv := range loadVectors(t) {
		var r Routes
		if lv.file.Type == "Routes" && !decodeRoutesFast(lv.cbor, &r) {
			t.Errorf("%s: the fast decoder declines a vector", lv.name)
		}
	}
}

// compareRoutesDecoders decodes b with DecodeBody and with DecodeRoutes,
// into a zero Routes and into one reused from a larger answer, and fails
// unless all agree. It reports whether the fast decoder took b.
func compareRoutesDecoders(t testing.TB, b []byte) (fastPath bool) {
	t.Helper()
	f := &Frame{Type: TypeGetRoutes, Body: b}
	var want, got Routes
	wantErr := f.DecodeBody(&want)
	gotErr := f.DecodeRoutes(&got)
	if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
		t.Fatalf("%x: DecodeRoutes error %v, DecodeBody error %v", b, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%x: DecodeRoutes %#v, DecodeBody %#v", b, got, want)
	}
	reused := Routes{
		Results: make([]RouteResult, 3, 64),
		Groups:  make([]GroupFreshness, 2, 64),
		Node:    NodeState{NodeID: "old", StartedMs: 9, WarmingUp: true},
	}
	for i := range reused.Results {
		reused.Results[i] = RouteResult{Topic: "old", Status: StatusNotFound, Version: 9, Route: []byte{0xa0}}
	}
	for i := range reused.Groups {
		reused.Groups[i] = GroupFreshness{BrokerName: "old", AgeMs: 9, DeadlineInMs: 9}
	}
	kept := reused.Results[0]
	gotErr = f.DecodeRoutes(&reused)
	if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
		t.Fatalf("%x: DecodeRoutes into a used Routes: error %v, DecodeBody error %v", b, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(reused, want) {
		t.Fatalf("%x: DecodeRoutes into a used Routes %#v, DecodeBody %#v", b, reused, want)
	}
	if kept.Topic != "old" || !bytes.Equal(kept.Route, []byte{0xa0}) {
		t.Fatalf("%x: a result copied out of the earlier answer changed: %#v", b, kept)
	}
	// Again into the same Routes, which now holds the answer's own
	// strings (shared where they repeat) or whatever a failed decode left.
	gotErr = f.DecodeRoutes(&reused)
	if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
		t.Fatalf("%x: DecodeRoutes again: error %v, DecodeBody error %v", b, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(reused, want) {
		t.Fatalf("%x: DecodeRoutes again %#v, DecodeBody %#v", b, reused, want)
	}
	var r Routes
	return len(b) > 0 && decodeRoutesFast(b, &r)
}

// TestDecodeRoutesChecksRepeatedStrings: a string the Routes already
// holds is reused only for bytes that are valid text: an answer repeating
// an invalid name the caller put there is refused as the general decoder
// refuses it.
func TestDecodeRoutesChecksRepeatedStrings(t *testing.T) {
	bad := "\xff\xfe"
	body := AppendRoutes(nil, &Routes{Results: []RouteResult{{Topic: bad}}, Groups: []GroupFreshness{{BrokerName: bad}}, Node: NodeState{NodeID: bad}})
	f := &Frame{Type: TypeGetRoutes, Body: body}
	wantErr := f.DecodeBody(&Routes{})
	r := Routes{Results: []RouteResult{{Topic: bad}}, Groups: []GroupFreshness{{BrokerName: bad}}, Node: NodeState{NodeID: bad}}
	gotErr := f.DecodeRoutes(&r)
	if wantErr == nil || gotErr == nil || gotErr.Error() != wantErr.Error() {
		t.Fatalf("DecodeRoutes %v, DecodeBody %v", gotErr, wantErr)
	}
}

// FuzzDecodeRoutes compares the fast response decoder with the general
// one, seeded with the Routes vectors and AppendRoutes output.
func FuzzDecodeRoutes(f *testing.F) {
	for _, b := range routesInputs(f, false) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { compareRoutesDecoders(t, b) })
}

// TestDecodeRoutesCopies: the strings and routes the fast decoder gives
// share no memory with the frame body, which the reader may reuse.
func TestDecodeRoutesCopies(t *testing.T) {
	route, _ := Marshal(&Route{Queues: []QueueData{{BrokerName: "b", ReadQueues: 8}}})
	body := AppendRoutes(nil, &Routes{Results: []RouteResult{{Topic: "a", Version: 5, Route: route}},
		Groups: []GroupFreshness{{BrokerName: "b", AgeMs: 1}}, Node: NodeState{NodeID: "n"}})
	var r Routes
	if !decodeRoutesFast(body, &r) {
		t.Fatal("the fast decoder declines a node's answer")
	}
	want := r.Results[0].Route
	want = bytes.Clone(want)
	for i := range body {
		body[i] = 0xff
	}
	if r.Results[0].Topic != "a" || r.Groups[0].BrokerName != "b" || r.Node.NodeID != "n" || !bytes.Equal(r.Results[0].Route, want) {
		t.Fatalf("the decoded answer changed with the body: %#v", r)
	}
	if got := append(r.Results[0].Route, 0x00); &got[0] == &r.Results[0].Route[0] {
		t.Error("a route slice has room past its end: appending to it would write into the next")
	}
}

// BenchmarkDecodeRoutes decodes the answer of one route read, as a node
// sends it (one route, the freshness of its two groups, the node's
// state), and of a refresh of 100 held topics.
func BenchmarkDecodeRoutes(b *testing.B) {
	route, _ := Marshal(&Route{Queues: []QueueData{{BrokerName: "broker-0", ReadQueues: 8, WriteQueues: 8, Perm: 6},
		{BrokerName: "broker-1", ReadQueues: 8, WriteQueues: 8, Perm: 6}},
		Brokers: []BrokerData{{Cluster: "BenchCluster", Name: "broker-0", Zone: "zone-0", Addrs: map[int64]string{0: "10.0.0.0:10911", 1: "10.0.0.1:10911"}},
			{Cluster: "BenchCluster", Name: "broker-1", Zone: "zone-1", Addrs: map[int64]string{0: "10.0.1.0:10911", 1: "10.0.1.1:10911"}}}})
	groups := []GroupFreshness{{BrokerName: "broker-0", AgeMs: 1200, DeadlineInMs: 3598800}, {BrokerName: "broker-1", AgeMs: 1300, DeadlineInMs: 3598700}}
	node := NodeState{NodeID: "node-7f3a", StartedMs: 1735689000000}
	one := AppendRoutes(nil, &Routes{Results: []RouteResult{{Topic: "rmq_bench_topic_0001", Version: 0x64d1aefc40534f4d, Route: route}},
		Groups: groups, Node: node})
	refresh := &Routes{Groups: groups, Node: node}
	for i := range 100 {
		refresh.Results = append(refresh.Results, RouteResult{Topic: fmt.Sprintf("rmq_bench_topic_%04d", i), Status: StatusNotModified, Version: 0x64d1aefc40534f4d})
	}
	many := AppendRoutes(nil, refresh)
	for _, c := range []struct {
		name string
		body []byte
	}{{"route", one}, {"refresh100", many}} {
		f := &Frame{Type: TypeGetRoutes, Body: c.body}
		b.Run(c.name+"/DecodeBody", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r Routes
				if err := f.DecodeBody(&r); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/DecodeRoutes", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var r Routes
				if err := f.DecodeRoutes(&r); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/DecodeRoutesReused", func(b *testing.B) {
			b.ReportAllocs()
			var r Routes
			for b.Loop() {
				if err := f.DecodeRoutes(&r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
