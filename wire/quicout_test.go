package wire

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// TestClientAttrsDecodingKeepsNothingOverTheCaps: ClientAttrs within the
// caps of PROTOCOL.md 7.9 decode as they were sent; over a cap they keep
// neither zone nor labels, only the mark, and the rules of 3.2 still hold
// for every label, kept or not.
func TestClientAttrsDecodingKeepsNothingOverTheCaps(t *testing.T) {
	labels := func(n int, size int) map[string]string {
		m := map[string]string{}
		for i := range n {
			k := fmt.Sprint("k", i)
			m[k] = strings.Repeat("v", size-len(k))
		}
		return m
	}
	for _, c := range []struct {
		name string
		in   ClientAttrs
		want ClientAttrs
	}{
		{"at the caps", ClientAttrs{Zone: strings.Repeat("z", 256), Labels: labels(16, 256)}, ClientAttrs{Zone: strings.Repeat("z", 256), Labels: labels(16, 256)}},
		{"17 labels", ClientAttrs{Zone: "z", Labels: labels(17, 4)}, ClientAttrs{OverCapsSent: true}},
		{"a label of 257 bytes", ClientAttrs{Zone: "z", Labels: labels(1, 257)}, ClientAttrs{OverCapsSent: true}},
		{"a zone of 257 bytes", ClientAttrs{Zone: strings.Repeat("z", 257), Labels: labels(1, 4)}, ClientAttrs{OverCapsSent: true}},
		{"none", ClientAttrs{}, ClientAttrs{}},
	} {
		b, err := Marshal(&GetRoutes{Topics: []TopicVersion{{Topic: "T"}}, Client: c.in})
		if err != nil {
			t.Fatal(err)
		}
		var q GetRoutes
		if err := (&Frame{Type: TypeGetRoutes, Body: b}).DecodeGetRoutes(&q); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(q.Client, c.want) {
			t.Errorf("%s: decoded %+v, want %+v", c.name, q.Client, c.want)
		}
	}
	// {1: [{1: "T"}], 2: {2: labels}} with labels' bytes given.
	body := func(labels ...byte) []byte {
		return append([]byte{0xa2, 0x01, 0x81, 0xa1, 0x01, 0x61, 0x54, 0x02, 0xa1, 0x02}, labels...)
	}
	many := []byte{0xb8, 0x12} // 18 labels, over the cap, then a bad one
	for i := range 17 {
		many = append(many, 0x62, 'k', byte('a'+i), 0x60)
	}
	for name, b := range map[string][]byte{
		"a value not text":           body(0xa1, 0x61, 0x61, 0x01),
		"a key not text":             body(0xa1, 0x01, 0x61, 0x61),
		"a duplicate label":          body(0xa2, 0x61, 0x61, 0x60, 0x61, 0x61, 0x60),
		"invalid UTF-8":              body(0xa1, 0x61, 0x61, 0x61, 0xff),
		"labels an array":            body(0x81, 0x60),
		"past the cap, not text":     body(append(many, 0x61, 'x', 0x01)...),
		"past the cap, a duplicate":  body(append(many, 0x62, 'k', 'a', 0x60)...),
		"past the cap, bad UTF-8":    body(append(many, 0x61, 'x', 0x61, 0xc3)...),
		"past the cap, a tag inside": body(append(many, 0x61, 'x', 0xc0, 0x60)...),
	} {
		var q GetRoutes
		err := (&Frame{Type: TypeGetRoutes, Body: b}).DecodeGetRoutes(&q)
		if e, ok := err.(*Error); !ok || e.Code != CodeBadRequest {
			t.Errorf("%s: got %v, want code 1", name, err)
		}
	}
	var q GetRoutes
	if err := (&Frame{Type: TypeGetRoutes, Body: body(0xf6)}).DecodeGetRoutes(&q); err != nil || q.Client.Labels != nil || q.Client.OverCapsSent {
		t.Errorf("null labels: %+v, %v", q.Client, err)
	}
}

// TestArrayLenPastKeysOfOtherTypes: text and negative keys are ignored
// like unknown keys (PROTOCOL.md 3), so key 1 may follow them, in any
// order; a node's topic count check must still find it.
func TestArrayLenPastKeysOfOtherTypes(t *testing.T) {
	for name, c := range map[string]struct {
		body []byte
		n    uint64
		ok   bool
	}{
		"a text key first":        {[]byte{0xa2, 0x61, 'x', 0x00, 0x01, 0x83, 0, 0, 0}, 3, true},
		"a negative key first":    {[]byte{0xa2, 0x20, 0x81, 0x00, 0x01, 0x82, 0, 0}, 2, true},
		"a map key first":         {[]byte{0xa2, 0xa1, 0x00, 0x00, 0x00, 0x01, 0x81, 0}, 1, true},
		"key 1 in a wider form":   {[]byte{0xa1, 0x18, 0x01, 0x81, 0}, 1, true},
		"a text key \"1\" only":   {[]byte{0xa1, 0x61, '1', 0x81, 0}, 0, false},
		"truncated after the key": {[]byte{0xa2, 0x61, 'x'}, 0, false},
	} {
		if n, ok := ArrayLen(c.body, 1); n != c.n || ok != c.ok {
			t.Errorf("%s: ArrayLen = %d, %v, want %d, %v", name, n, ok, c.n, c.ok)
		}
	}
}

// TestDuplicateKeysInLargeMaps: a map of more than 16 keys out of order
// is checked by sorting where its keys lie; it must refuse what comparing
// every key with every key before it refuses, at the same pair (keys by
// value: integer widths, float precisions, -0 and 0 alike, NaN equal to
// nothing, text and bytes of the same content apart).
func TestDuplicateKeysInLargeMaps(t *testing.T) {
	keys := [][]byte{
		{0x05}, {0x18, 0x05}, {0x19, 0x00, 0x05}, {0x20}, {0x38, 0x00},
		{0x61, 'a'}, {0x41, 'a'}, {0x62, 'a', 'b'}, {0xf9, 0x40, 0x00}, {0xfa, 0x40, 0x00, 0x00, 0x00},
		{0xf9, 0x80, 0x00}, {0xf9, 0x00, 0x00}, {0xf9, 0x7e, 0x00}, {0xf6}, {0xf7}, {0xf4},
		{0x80}, {0x81, 0x00}, {0xa0},
	}
	// reference is the pair a key-by-key walk stops at, or -1.
	reference := func(ks [][]byte) int {
		for i := range ks {
			for j := range i {
				a, b := keyOf(ks[i]), keyOf(ks[j])
				if a == b {
					return i
				}
			}
		}
		return -1
	}
	seed := uint64(1)
	rnd := func(n int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int(seed>>33) % n
	}
	for round := range 3000 {
		n := 17 + rnd(40)
		var ks [][]byte
		for i := range n {
			if rnd(4) == 0 {
				ks = append(ks, keys[rnd(len(keys))])
			} else { // distinct integers, descending: out of order
				ks = append(ks, binary.BigEndian.AppendUint32([]byte{0x1a}, uint32(1000-i)))
			}
		}
		m := []byte{0xb8, byte(n)}
		for _, k := range ks {
			m = append(append(m, k...), 0x00)
		}
		err := checkDupKeys(m)
		want := reference(ks)
		switch {
		case want < 0 && err != nil:
			t.Fatalf("round %d: %x refused: %v", round, m, err)
		case want >= 0 && (err == nil || err.Error() != dupKeyError(uint64(want)).Error()):
			t.Fatalf("round %d: %x: got %v, want a duplicate at %d", round, m, err, want)
		}
	}
}

// allocated returns the bytes the process allocated while fn ran.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodingCostsTheBytesReceived: decoding a body or a Frame map with
// many unknown text keys, or with a large map of out-of-order keys inside
// an unknown key, allocates a few times the bytes decoded, not a set of
// keys many times them (the library's own duplicate check kept every
// unknown key of a struct's map; the walk's set copied every key).
func TestDecodingCostsTheBytesReceived(t *testing.T) {
	const n = 100_000
	var unknown []byte
	for i := range n {
		k := fmt.Sprintf("%x", i)
		unknown = append(unknown, 0x60+byte(len(k)))
		unknown = append(append(unknown, k...), 0x00)
	}
	routes := binary.BigEndian.AppendUint32([]byte{0xba}, n+1)
	routes = append(append(routes, 0x01, 0x81, 0xa1, 0x01, 0x61, 'a'), unknown...)
	ping := binary.BigEndian.AppendUint32([]byte{0xba}, n+2)
	ping = append(append(ping, 0x01, 0x11, 0x02, 0x06), unknown...)
	descending := []byte{0xa2, 0x01, 0x81, 0xa1, 0x01, 0x61, 'a', 0x09, 0xba}
	descending = binary.BigEndian.AppendUint32(descending, n)
	for i := n; i > 0; i-- {
		descending = binary.BigEndian.AppendUint32(append(descending, 0x1a), uint32(i))
		descending = append(descending, 0x00)
	}
	for _, c := range []struct {
		name string
		size int
		fn   func() error
	}{
		{"a get-routes body with unknown text keys", len(routes), func() error {
			var q GetRoutes
			return (&Frame{Type: TypeGetRoutes, Body: routes}).DecodeGetRoutes(&q)
		}},
		{"a Frame map with unknown text keys", len(ping), func() error {
			var f Frame
			return DecodeFrame(ping, &f)
		}},
		{"a body whose unknown key holds keys in descending order", len(descending), func() error {
			var q GetRoutes
			return (&Frame{Type: TypeGetRoutes, Body: descending}).DecodeGetRoutes(&q)
		}},
	} {
		var err error
		got := allocated(func() { err = c.fn() })
		t.Logf("%s, %d bytes: %d KiB allocated", c.name, c.size, got>>10)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if limit := uint64(8 * c.size); got > limit {
			t.Errorf("%s of %d bytes allocated %d KiB, more than %d KiB", c.name, c.size, got>>10, limit>>10)
		}
	}
}
