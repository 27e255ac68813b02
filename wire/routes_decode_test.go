package wire

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
)

// twoTopicAnswers are two answers of one route each, for different
// topics, as a client polling random topics into one Routes decodes them.
func twoTopicAnswers(tb testing.TB) [2][]byte {
	route, err := Marshal(&Route{Queues: []QueueData{{BrokerName: "broker-0", ReadQueues: 8, WriteQueues: 8, Perm: 6}},
		Brokers: []BrokerData{{Cluster: "c", Name: "broker-0", Addrs: map[int64]string{0: "10.0.0.0:10911"}}}})
	if err != nil {
		tb.Fatal(err)
	}
	var out [2][]byte
	for i := range out {
		out[i] = AppendRoutes(nil, &Routes{Results: []RouteResult{{Topic: fmt.Sprintf("rmq_bench_topic_%04d", i), Version: RouteVersion(route), Route: route}},
			Groups: []GroupFreshness{{BrokerName: "broker-0", AgeMs: 1, DeadlineInMs: 2}}, Node: NodeState{NodeID: "n", StartedMs: 3}})
	}
	return out
}

// TestDecodeRoutesOneCopy: an answer whose topic is new costs one
// allocation, the copy its texts and routes share; a caller writing into
// (or appending to) a route changes none of the answer's strings.
func TestDecodeRoutesOneCopy(t *testing.T) {
	answers := twoTopicAnswers(t)
	var r Routes
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		if !decodeRoutesFast(answers[i%2], &r) {
			t.Fatal("the fast decoder declines a node's answer")
		}
		i++
	})
	if allocs != 1 {
		t.Errorf("%v allocations per answer with a new topic, want 1", allocs)
	}

	route, _ := Marshal(&Route{Queues: []QueueData{{BrokerName: "b", ReadQueues: 8}}})
	body := AppendRoutes(nil, &Routes{Results: []RouteResult{{Topic: "t1", Version: 5, Route: route}, {Topic: "t2", Version: 6, Route: route}},
		Groups: []GroupFreshness{{BrokerName: "g", AgeMs: 1}}, Node: NodeState{NodeID: "n"}})
	r = Routes{}
	if !decodeRoutesFast(body, &r) {
		t.Fatal("the fast decoder declines a node's answer")
	}
	for k := range r.Results {
		rt := r.Results[k].Route
		for j := range rt {
			rt[j] = 0xff
		}
		_ = append(rt, bytes.Repeat([]byte{0xff}, 64)...)
	}
	if r.Results[0].Topic != "t1" || r.Results[1].Topic != "t2" || r.Groups[0].BrokerName != "g" || r.Node.NodeID != "n" {
		t.Fatalf("writing into the routes changed the answer's strings: %#v", r)
	}
}

// BenchmarkDecodeRoutesNewTopic decodes one-route answers alternating
// between two topics into one Routes, as the bench's route op does.
func BenchmarkDecodeRoutesNewTopic(b *testing.B) {
	answers := twoTopicAnswers(b)
	var r Routes
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		f := Frame{Type: TypeGetRoutes, Body: answers[i%2]}
		if err := f.DecodeRoutes(&r); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// TestDecodeGetRoutesReuses: a get-routes request decoded into a
// GetRoutes used before takes its Topics array when it has room, and
// gives what a fresh decode gives.
func TestDecodeGetRoutesReuses(t *testing.T) {
	body, err := MarshalBody(&GetRoutes{Topics: []TopicVersion{{Topic: "a"}, {Topic: "b", Version: 7}}})
	if err != nil {
		t.Fatal(err)
	}
	f := &Frame{Type: TypeGetRoutes, Body: body}
	var want GetRoutes
	if err := f.DecodeBody(&want); err != nil {
		t.Fatal(err)
	}
	used := GetRoutes{Topics: make([]TopicVersion, 3, 4)}
	for i := range used.Topics {
		used.Topics[i] = TopicVersion{Topic: "old", Version: 9}
	}
	array := &used.Topics[:1][0]
	if err := f.DecodeGetRoutes(&used); err != nil || !reflect.DeepEqual(used, want) {
		t.Fatalf("into a used GetRoutes: %#v, %v; want %#v", used, err, want)
	}
	if &used.Topics[0] != array {
		t.Error("the used array was not reused")
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := f.DecodeGetRoutes(&used); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 1 {
		t.Errorf("%v allocations per request into a used GetRoutes, want 1 (the names' copy)", allocs)
	}
}

// FuzzDecodeGetRoutesReused compares DecodeGetRoutes into a used
// GetRoutes with the general decoder into a fresh one.
func FuzzDecodeGetRoutesReused(f *testing.F) {
	for _, b := range getRoutesInputs(f)[:20] {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := &Frame{Type: TypeGetRoutes, Body: b}
		var want GetRoutes
		wantErr := fr.DecodeBody(&want)
		used := GetRoutes{Topics: make([]TopicVersion, 2, 64), Client: ClientAttrs{Zone: "old"}}
		used.Topics[0] = TopicVersion{Topic: "old", Version: 9}
		gotErr := fr.DecodeGetRoutes(&used)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("%x: DecodeGetRoutes into a used GetRoutes error %v, DecodeBody error %v", b, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(used, want) {
			t.Fatalf("%x: DecodeGetRoutes into a used GetRoutes %#v, DecodeBody %#v", b, used, want)
		}
	})
}
