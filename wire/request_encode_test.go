package wire

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// getRoutesQueries are get-routes requests for the encoder tests: the
// vectors, and random ones over each field's length and integer
// boundaries, with and without a zone and labels.
func getRoutesQueries(t *testing.T) []GetRoutes {
	qs := append(decodedVectors[GetRoutes](t, "GetRoutes"), GetRoutes{}, GetRoutes{Topics: []TopicVersion{}},
		GetRoutes{Topics: []TopicVersion{{Topic: "a"}}, Client: ClientAttrs{Labels: map[string]string{}}},
		GetRoutes{Topics: []TopicVersion{{Topic: "a"}}, Client: ClientAttrs{Zone: "z", Labels: map[string]string{"k": "v", "kk": "w", "b": "x"}}})
	// Heads of every width: a 70000-byte name once (a 4-byte length),
	// the other lengths at random.
	qs = append(qs, GetRoutes{Topics: []TopicVersion{{Topic: strings.Repeat("t", 70000), Version: 1}}, Client: ClientAttrs{Zone: strings.Repeat("z", 70000)}})
	ints := []uint64{0, 1, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<64 - 1}
	lens := []int{0, 1, 23, 24, 255, 256, 300}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		q := GetRoutes{Topics: make([]TopicVersion, rng.IntN(30))}
		if i == 0 {
			q.Topics = make([]TopicVersion, 300) // an array head over 255
		}
		for k := range q.Topics {
			q.Topics[k] = TopicVersion{Topic: strings.Repeat("t", lens[rng.IntN(len(lens))]), Version: ints[rng.IntN(len(ints))]}
		}
		if rng.IntN(2) == 0 {
			q.Client.Zone = strings.Repeat("z", lens[rng.IntN(len(lens))])
		}
		qs = append(qs, q)
	}
	return qs
}

// TestAppendGetRoutes: the hand-written request encoder gives Marshal's
// bytes for every query, and the vectors' bytes for theirs.
func TestAppendGetRoutes(t *testing.T) {
	for _, q := range getRoutesQueries(t) {
		want, err := Marshal(&q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendGetRoutes([]byte{0xff}, &q)
		if err != nil || got[0] != 0xff || !bytes.Equal(got[1:], want) {
			t.Fatalf("%+v: AppendGetRoutes %x, %v; Marshal %x", q, got, err, want)
		}
	}
	for _, lv := range loadVectors(t) {
		if lv.file.Type == "GetRoutes" {
			var q GetRoutes
			if err := Unmarshal(lv.cbor, &q); err != nil {
				t.Fatal(err)
			}
			if got, _ := AppendGetRoutes(nil, &q); !bytes.Equal(got, lv.cbor) {
				t.Errorf("%s: AppendGetRoutes %x, vector %x", lv.name, got, lv.cbor)
			}
		}
	}
}

// TestAppendRequest: a request frame built in one buffer is the frame
// NewRequest and AppendFrame give, for get-routes and other bodies, ids
// and no body; an unencodable body is NewRequest's error and leaves dst.
func TestAppendRequest(t *testing.T) {
	check := func(ty Type, id uint64, body any) {
		t.Helper()
		f, err := NewRequest(ty, id, body)
		if err != nil {
			t.Fatal(err)
		}
		want, err := AppendFrame(nil, f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendRequest([]byte{1, 2}, ty, id, body)
		if err != nil || !bytes.Equal(got[:2], []byte{1, 2}) || !bytes.Equal(got[2:], want) {
			t.Fatalf("%s %d %+v: AppendRequest %x, %v; AppendFrame %x", ty, id, body, got, err, want)
		}
	}
	for i, q := range getRoutesQueries(t) {
		check(TypeGetRoutes, uint64(i)*997, &q)
	}
	check(TypeGetRoutes, 1, (*GetRoutes)(nil))
	check(TypePing, 0, nil)
	check(TypePing, 1<<40, nil)
	check(TypeHeartbeat, 7, &Heartbeat{Cluster: "c", Addr: "a", Epoch: 3})
	check(TypeRegister, 70000, &Register{Cluster: "c", BrokerName: "b", Topics: []TopicConfig{{Name: "t", ReadQueues: 8}}})

	_, want := NewRequest(TypeKVPut, 1, make(chan int))
	got, err := AppendRequest([]byte{9}, TypeKVPut, 1, make(chan int))
	if err == nil || err.Error() != want.Error() || !bytes.Equal(got, []byte{9}) {
		t.Errorf("unencodable body: %x, %v; NewRequest: %v", got, err, want)
	}
}

func BenchmarkEncodeGetRoutes(b *testing.B) {
	q := &GetRoutes{Topics: []TopicVersion{{Topic: "rmq_bench_topic_0001"}}}
	b.Run("NewRequest+AppendFrame", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f, err := NewRequest(TypeGetRoutes, 12345, q)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := AppendFrame(nil, f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendRequest", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 256)
		for b.Loop() {
			var err error
			if buf, err = AppendRequest(buf[:0], TypeGetRoutes, 12345, q); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzAppendGetRoutes compares the hand-written get-routes encoder with
// Marshal on queries built from the fuzzer's topics, versions and zone
// (any bytes, valid text or not).
func FuzzAppendGetRoutes(f *testing.F) {
	f.Add("TopicTest", uint64(0), "OrderTopic", uint64(7264780072359513933), "", uint8(2))
	f.Add(strings.Repeat("t", 300), uint64(1<<40), "\xff", uint64(23), "zone-1", uint8(40))
	f.Fuzz(func(t *testing.T, a string, va uint64, b string, vb uint64, zone string, n uint8) {
		q := GetRoutes{Client: ClientAttrs{Zone: zone}}
		for i := range int(n) {
			if i%2 == 0 {
				q.Topics = append(q.Topics, TopicVersion{Topic: a, Version: va})
			} else {
				q.Topics = append(q.Topics, TopicVersion{Topic: b, Version: vb})
			}
		}
		want, err := Marshal(&q)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := AppendGetRoutes(nil, &q); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%+v: AppendGetRoutes %x, %v; Marshal %x", q, got, err, want)
		}
	})
}

// BenchmarkEncodeRequest builds the broker session's request frames, a
// heartbeat and the bench workload's 100-topic registration, as a broker
// does (AppendRequest into a reused buffer) and through the public
// NewRequest and AppendFrame.
func BenchmarkEncodeRequest(b *testing.B) {
	bodies := []struct {
		name string
		t    Type
		body any
	}{
		{"heartbeat", TypeHeartbeat, &Heartbeat{Cluster: "BenchCluster", Addr: "10.1.0.1:10911", Epoch: 12345, DataVersion: DataVersion{Counter: 1}}},
		{"register", TypeRegister, benchRegister()},
	}
	for _, c := range bodies {
		b.Run(c.name+"/NewRequest+AppendFrame", func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 4096)
			for b.Loop() {
				f, err := NewRequest(c.t, 12345, c.body)
				if err != nil {
					b.Fatal(err)
				}
				if buf, err = AppendFrame(buf[:0], f); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/AppendRequest", func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 4096)
			for b.Loop() {
				var err error
				if buf, err = AppendRequest(buf[:0], c.t, 12345, c.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
