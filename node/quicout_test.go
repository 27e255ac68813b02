package node

// Tests of an independent tester writing a client from wire/PROTOCOL.md
// alone: raw quic-go streams and hand-built CBOR frames.

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// manyLabelsWatch is a watch frame of one topic whose ClientAttrs carry n
// distinct labels ("l<i>" -> ""): a few bytes each on the wire.
func manyLabelsWatch(t *testing.T, id uint64, n int) []byte {
	t.Helper()
	body := []byte{0xa2, 0x01, 0x81, 0xa1, 0x01, 0x61, 0x61, 0x02, 0xa1, 0x02, 0xba}
	body = binary.BigEndian.AppendUint32(body, uint32(n))
	for i := range n {
		k := fmt.Sprintf("l%x", i)
		body = append(body, 0x60+byte(len(k)))
		body = append(body, k...)
		body = append(body, 0x60)
	}
	frame, err := wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeWatch, ID: id, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// TestOversizedClientAttrsNotKeptByWatches: ClientAttrs are never refused
// (PROTOCOL.md 7.9); over their caps (16 labels, 256 bytes) a read is
// answered by the route fail mode. A watch whose attrs had a few hundred
// thousand labels in a 1 MiB frame was decoded into a Go map many times
// the bytes received, and the watch stream kept that map for as long as
// it lived: memory that follows what a client declares, held by every
// stream of every connection.
func TestOversizedClientAttrsNotKeptByWatches(t *testing.T) {
	tn := startNode(t, nil)
	qc, err := quic.DialAddr(ctxT(t), tn.Addr().String(), tn.tlsFor(pki.RoleClient, "labels"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	const streams = 8
	sent := 0
	before := liveHeap()
	var keep []*quic.Stream
	for i := range streams {
		frame := manyLabelsWatch(t, uint64(i+1), 1<<20/8)
		sent += len(frame)
		s, err := qc.OpenStreamSync(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, s)
		s.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := s.Write(frame); err != nil {
			t.Fatal(err)
		}
		f, err := wire.ReadFrame(s, wire.MaxFrameLen)
		if err != nil {
			t.Fatal(err)
		}
		if f.Error != nil || f.ID != uint64(i+1) {
			t.Fatalf("watch %d: %+v", i+1, f.Error)
		}
	}
	grew := int64(liveHeap()) - int64(before)
	t.Logf("%d watches of %d KiB in all: live heap grew %d KiB", streams, sent>>10, grew>>10)
	// The streams' own buffers and QUIC's: well under the bytes sent.
	if limit := int64(sent); grew > limit {
		t.Errorf("%d open watch streams whose frames were %d KiB hold %d KiB", streams, sent>>10, grew>>10)
	}
	runtime.KeepAlive(keep)
}

// TestRefusedWatchKeepsTheStreamsClientAttrs: "a watch over the cap gets
// code 12 and changes nothing" (PROTOCOL.md 11). A refused watch still
// replaced the ClientAttrs the stream's route policy filters its pushes
// with, so a client in zone-1 whose extra watch was refused was pushed
// the routes of the zone its refused request named.
func TestRefusedWatchKeepsTheStreamsClientAttrs(t *testing.T) {
	tn := startNode(t, func(c *Config) {
		c.MaxWatchesPerConn = 1
		c.PolicyCallTimeout = 2 * time.Second // a dry run under -race on a loaded machine
	})
	op := tn.dial(pki.RoleOperator)
	zonedBrokers(t, op)
	if _, err := op.PolicyPush(policyCtx(t), "route", readModule(t, "zone-affinity.wasm")); err != nil {
		t.Fatal(err)
	}
	s := rawStream(t, tn, pki.RoleClient)
	s.SetDeadline(time.Now().Add(time.Minute))
	send := func(id uint64, w *wire.Watch) {
		t.Helper()
		b, err := wire.NewRequest(wire.TypeWatch, id, w)
		if err != nil {
			t.Fatal(err)
		}
		frame, err := wire.AppendFrame(nil, b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
	// next reads frames until the answer of id, or the next push when id
	// is 0, and returns it.
	next := func(id uint64) wire.Frame {
		t.Helper()
		for {
			f, err := wire.ReadFrame(s, wire.MaxFrameLen)
			if err != nil {
				t.Fatal(err)
			}
			if (id == 0 && f.Type == wire.TypeRouteEvent) || (id != 0 && f.ID == id) {
				return f
			}
		}
	}
	groups := func(f wire.Frame) []string {
		t.Helper()
		var ev wire.RouteEvent
		if err := f.DecodeBody(&ev); err != nil {
			t.Fatal(err)
		}
		var r wire.Route
		if err := wire.Unmarshal(ev.Result.Route, &r); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, b := range r.Brokers {
			names = append(names, b.Name)
		}
		return names
	}
	send(1, &wire.Watch{Topics: []wire.TopicVersion{{Topic: "t"}}, Client: wire.ClientAttrs{Zone: "zone-1"}})
	if f := next(1); f.Error != nil {
		t.Fatalf("watch: %v", f.Error)
	}
	if got := groups(next(0)); !slices.Equal(got, []string{"group-a", "group-c"}) {
		t.Fatalf("zone-1 is pushed %v, want group-a and group-c", got)
	}
	send(2, &wire.Watch{Topics: []wire.TopicVersion{{Topic: "u"}}, Client: wire.ClientAttrs{Zone: "zone-2"}})
	if f := next(2); f.Error == nil || f.Error.Code != wire.CodeOverloaded {
		t.Fatalf("a watch over the cap: %+v, want code 12", f.Error)
	}
	// A change of t: a new group in zone-1.
	if _, err := op.Register(ctxT(t), withZone(registration("c1", "group-d", 0, "10.0.4.1:1", "t"), "zone-1")); err != nil {
		t.Fatal(err)
	}
	if got := groups(next(0)); !slices.Equal(got, []string{"group-a", "group-c", "group-d"}) {
		t.Errorf("after a refused watch naming zone-2, the stream is pushed %v, want zone-1's group-a, group-c and group-d", got)
	}
}

// TestTopicCountCheckedPastKeysOfOtherTypes: the topic count of a
// get-routes, watch or unwatch is "decided from the Topics array's header
// before any element is decoded" (PROTOCOL.md 4.3, 8.9), and keys that are
// text strings or negative integers are ignored like unknown keys (3). A
// body with such a key before key 1 escaped the count check: an unwatch
// of a million empty names was decoded in full into a 16 MiB []string.
func TestTopicCountCheckedPastKeysOfOtherTypes(t *testing.T) {
	tn := startNode(t, nil)
	s := rawStream(t, tn, pki.RoleClient)
	s.SetDeadline(time.Now().Add(time.Minute))
	n := 1<<20 - 64
	for _, c := range []struct {
		name  string
		typ   wire.Type
		first []byte // the pair before key 1
		elem  byte
		want  string
	}{
		{"unwatch, a text key first", wire.TypeUnwatch, []byte{0x61, 'x', 0x00}, 0x60, "unwatch names 1048512 topics, more than 10000"},
		{"unwatch, a negative key first", wire.TypeUnwatch, []byte{0x20, 0x00}, 0x60, "unwatch names 1048512 topics, more than 10000"},
		{"get-routes, a text key first", wire.TypeGetRoutes, []byte{0x61, 'x', 0x00}, 0xa0, "get-routes names 1048512 topics, more than 10000"},
		{"watch, a negative key first", wire.TypeWatch, []byte{0x20, 0x00}, 0xa0, "watch names 1048512 topics: give 1 to 10000"},
	} {
		body := append([]byte{0xa2}, c.first...)
		body = append(body, 0x01, 0x9a, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		body = append(body, make([]byte, n)...)
		for i := len(body) - n; i < len(body); i++ {
			body[i] = c.elem
		}
		frame, err := wire.AppendFrame(nil, &wire.Frame{Type: c.typ, ID: 7, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if _, err := s.Write(frame); err != nil {
			t.Fatal(err)
		}
		f, err := wire.ReadFrame(s, wire.MaxFrameLen)
		if err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		grew := after.TotalAlloc - before.TotalAlloc
		if f.Error == nil || f.Error.Code != wire.CodeBadRequest || f.Error.Message != c.want {
			t.Errorf("%s: answer %+v, want code 1 %q", c.name, f.Error, c.want)
		}
		if limit := uint64(6 * len(frame)); grew > limit {
			t.Errorf("%s: %d bytes allocated %d KiB, more than %d KiB", c.name, len(frame), grew>>10, limit>>10)
		}
	}
}

// TestDuplicateKeyCheckAllocatesByBytes: a map's keys are checked for
// duplicates at any depth, unknown keys included (PROTOCOL.md 3.2). A map
// whose keys are out of order is checked with a set of its keys; a
// reader's 1 MiB get-routes whose unknown key held a map of a few hundred
// thousand small keys in descending order made that set many times the
// frame's size.
func TestDuplicateKeyCheckAllocatesByBytes(t *testing.T) {
	tn := startNode(t, nil)
	s := rawStream(t, tn, pki.RoleClient)
	s.SetDeadline(time.Now().Add(time.Minute))
	// {1: [{1: "a"}], 9: {k_n: 0, ..., k_1: 0}}, keys descending.
	n := 170_000
	body := []byte{0xa2, 0x01, 0x81, 0xa1, 0x01, 0x61, 'a', 0x09, 0xba}
	body = binary.BigEndian.AppendUint32(body, uint32(n))
	for i := n; i > 0; i-- {
		body = append(body, 0x1a)
		body = binary.BigEndian.AppendUint32(body, uint32(i))
		body = append(body, 0x00)
	}
	frame, err := wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeGetRoutes, ID: 3, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := s.Write(frame); err != nil {
		t.Fatal(err)
	}
	f, err := wire.ReadFrame(s, wire.MaxFrameLen)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	grew := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes: %d KiB allocated, answer %+v", len(frame), grew>>10, f.Error)
	if f.Error != nil {
		t.Errorf("a get-routes with a large unknown map: %+v, want an answer", f.Error)
	}
	// The whole process, QUIC and the race detector included: loose here,
	// wire's TestDecodingCostsTheBytesReceived bounds the decoding itself.
	if limit := uint64(12 * len(frame)); grew > limit {
		t.Errorf("a get-routes of %d bytes allocated %d KiB, more than %d KiB", len(frame), grew>>10, limit>>10)
	}
}

// TestUnknownKeysCostTheirBytes: unknown keys are ignored (PROTOCOL.md
// 3.1), text keys too (3), and duplicates are refused at any depth (3.2).
// The CBOR library, asked to refuse duplicates itself, kept every unknown
// key of a struct-like map in a set of its own: a reader's 630 KB
// get-routes, or ping, with 100,000 unknown text keys made about 10 MiB of
// them, the node's own duplicate check having already done the work.
func TestUnknownKeysCostTheirBytes(t *testing.T) {
	tn := startNode(t, nil)
	s := rawStream(t, tn, pki.RoleClient)
	s.SetDeadline(time.Now().Add(time.Minute))
	unknown := func(n int) []byte {
		var b []byte
		for i := range n {
			k := fmt.Sprintf("%x", i)
			b = append(b, 0x60+byte(len(k)))
			b = append(append(b, k...), 0x00)
		}
		return b
	}
	const n = 100_000
	routes := binary.BigEndian.AppendUint32([]byte{0xba}, n+1)
	routes = append(append(routes, 0x01, 0x81, 0xa1, 0x01, 0x61, 'a'), unknown(n)...)
	routesFrame, err := wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeGetRoutes, ID: 5, Body: routes})
	if err != nil {
		t.Fatal(err)
	}
	ping := binary.BigEndian.AppendUint32([]byte{0xba}, n+2)
	ping = append(append(ping, 0x01, 0x11, 0x02, 0x06), unknown(n)...) // {1: 17, 2: 6, ...}
	pingFrame := binary.BigEndian.AppendUint32(nil, uint32(len(ping)))
	pingFrame = append(pingFrame, ping...)
	for _, c := range []struct {
		name  string
		frame []byte
		id    uint64
	}{{"a get-routes body", routesFrame, 5}, {"a ping's Frame map", pingFrame, 6}} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if _, err := s.Write(c.frame); err != nil {
			t.Fatal(err)
		}
		f, err := wire.ReadFrame(s, wire.MaxFrameLen)
		if err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		grew := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s, %d bytes: %d KiB allocated", c.name, len(c.frame), grew>>10)
		if f.Error != nil || f.ID != c.id {
			t.Errorf("%s with unknown text keys: %+v (id %d), want an answer", c.name, f.Error, f.ID)
		}
		// The frame's buffer grows by doubling, the get-routes decoder
		// copies the body once, the library still boxes each unknown text
		// key it reads (tens of bytes a key of 3), and the whole process
		// counts, QUIC and the race detector included: under the 18 times
		// the bytes the set of keys cost, and loose (wire's
		// TestDecodingCostsTheBytesReceived bounds the decoding itself).
		if limit := uint64(15 * len(c.frame)); grew > limit {
			t.Errorf("%s of %d bytes allocated %d KiB, more than %d KiB", c.name, len(c.frame), grew>>10, limit>>10)
		}
	}
}

// TestIdleStreamAfterALargePollKeepsLittle: "each open stream costs the
// node memory (about 10 KiB while idle in edgereg)" (PROTOCOL.md 4.3). A
// stream kept the topics array of its last get-routes between frames,
// whatever its size: after one poll of 10,000 topics (a 40 KB request) an
// idle stream held 240 KB, on every stream of every connection.
func TestIdleStreamAfterALargePollKeepsLittle(t *testing.T) {
	tn := startNode(t, nil)
	qc, err := quic.DialAddr(ctxT(t), tn.Addr().String(), tn.tlsFor(pki.RoleClient, "polls"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	topics := make([]wire.TopicVersion, MaxTopicsPerQuery)
	for i := range topics {
		topics[i] = wire.TopicVersion{Topic: "a"}
	}
	req, err := wire.NewRequest(wire.TypeGetRoutes, 1, &wire.GetRoutes{Topics: topics})
	if err != nil {
		t.Fatal(err)
	}
	frame, err := wire.AppendFrame(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	const streams = 40
	var keep []*quic.Stream
	before := liveHeap()
	for range streams {
		s, err := qc.OpenStreamSync(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, s)
		s.SetDeadline(time.Now().Add(time.Minute))
		if _, err := s.Write(frame); err != nil {
			t.Fatal(err)
		}
		if f, err := wire.ReadFrame(s, wire.MaxFrameLen); err != nil || f.Error != nil {
			t.Fatalf("poll: %v %+v", err, f.Error)
		}
	}
	grew := int64(liveHeap()) - int64(before)
	per := grew / streams
	t.Logf("%d idle streams after a poll of %d topics (%d bytes): %d KiB, %d KiB each", streams, len(topics), len(frame), grew>>10, per>>10)
	if per > 64<<10 {
		t.Errorf("an idle stream after a poll of %d topics holds %d KiB, want about 10 KiB (4.3)", len(topics), per>>10)
	}
	runtime.KeepAlive(keep)
}
