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
	var in [][]byte
	for _, lv := range loadVectors(t) {
		if lv.file.Type == "GetRoutes" {
			in = append(in, lv.cbor)
		}
	}
	if len(in) == 0 {
		t.Fatal("no GetRoutes vectors")
	}
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

// TestDecodeRoutes: the fast response decoder gives what the general one
// gives, value and error, on every input.
func TestDecodeRoutes(t *testing.T) {
	var in [][]byte
	for _, lv := range loadVectors(t) {
		if lv.file.Type == "Routes" {
			in = append(in, lv.cbor)
		}
	}
	route, _ := Marshal(&Route{Queues: []QueueData{{BrokerName: "b", ReadQueues: 8}}})
	for _, r := range []Routes{
		{Results: []RouteResult{{Topic: "a", Status: StatusNotModified, Version: 5}}},
		{Results: []RouteResult{{Topic: "a", Status: StatusNotFound}, {Topic: "b", Status: StatusWarmingUp}, {Topic: "c", Version: 1 << 60}}},
		{Results: []RouteResult{{Topic: "a", Version: 5, Route: route}}},
		{Results: []RouteResult{}},
	} {
		in = append(in, AppendRoutes(nil, &r))
	}
	in = append(in,
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x02, 0x19, 0x01, 0x00}, // status 256
		[]byte{0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x05, 0x01},             // unknown key
		[]byte{0xa1, 0x01, 0x81, 0xa3, 0x01, 0x61, 0x61, 0x03, 0x01, 0x02, 0x01}, // out of order
		[]byte{0xa1, 0x01, 0x81, 0xa3, 0x01, 0x61, 0x61, 0x02, 0x01, 0x02, 0x01}, // duplicate
	)
	n := len(in)
	for _, b := range in[:n] {
		for k := range b {
			in = append(in, b[:k])
			for _, x := range []byte{0x00, 0x01, 0x02, 0x03, 0x04, 0x18, 0x20, 0x61, 0x80, 0xa3, 0xff} {
				m := bytes.Clone(b)
				m[k] = x
				in = append(in, m)
			}
		}
	}
	fast := 0
	for _, b := range in {
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
		var r Routes
		if len(b) > 0 && decodeRoutesFast(b, &r) {
			fast++
		}
	}
	if fast == 0 {
		t.Error("the fast path never ran")
	}
}

func FuzzDecodeRoutes(f *testing.F) {
	for _, lv := range loadVectors(f) {
		if lv.file.Type == "Routes" {
			f.Add(lv.cbor)
		}
	}
	f.Add(AppendRoutes(nil, &Routes{Results: []RouteResult{{Topic: "a", Status: StatusNotModified, Version: 5}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := &Frame{Type: TypeGetRoutes, Body: b}
		var want, got Routes
		wantErr := fr.DecodeBody(&want)
		gotErr := fr.DecodeRoutes(&got)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("%x: DecodeRoutes error %v, DecodeBody error %v", b, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%x: DecodeRoutes %#v, DecodeBody %#v", b, got, want)
		}
	})
}
