package wire

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// hostileTopicsBody is a register body (or, with update, an update-topics
// body) whose topics array declares and holds n copies of elem, none with
// a valid topic name.
func hostileTopicsBody(t *testing.T, update bool, n int, elem []byte) []byte {
	t.Helper()
	var b []byte
	if update {
		var err error
		// Omitted Upsert and Remove: a map of keys 1 to 4; key 5 goes last.
		if b, err = Marshal(&UpdateTopics{Cluster: "c", Addr: "127.0.0.1:10911", Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		if b[0] != 0xa4 {
			t.Fatalf("update-topics body starts %x", b[0])
		}
		b[0] = 0xa5
		b = append(b, 0x05)
	} else {
		b = AppendRegister(nil, &Register{Cluster: "c", BrokerName: "b", Addr: "127.0.0.1:10911"})
		if b[len(b)-1] != 0x80 { // the empty topics array, the last field
			t.Fatalf("register body ends %x", b[len(b)-1])
		}
		b = b[:len(b)-1]
	}
	b = appendHead(b, 0x80, uint64(n))
	for range n {
		b = append(b, elem...)
	}
	return b
}

// TestDecodeRegisterHostileTopicsBounded: a register (or update-topics)
// holding MaxArrayElements topics without a valid name is refused while
// decoding, with the code and text the node gives an invalid name, and
// decoding it allocates a small multiple of the bytes received, not 32
// bytes per declared topic (it took about 11 times the body before).
func TestDecodeRegisterHostileTopicsBounded(t *testing.T) {
	cases := []struct {
		name string
		elem []byte
	}{
		{"empty name", []byte{0xa1, 0x01, 0x60}},            // the fast path's shape
		{"no name", []byte{0xa0}},                           // one byte a topic
		{"bad character", []byte{0xa1, 0x01, 0x61, '.'}},    // the shortest non-empty name
		{"unknown key", []byte{0xa1, 0x06, 0x00}},           // declined by the fast path
		{"text key", []byte{0xa1, 0x61, 'x', 0x00}},         // declined by the fast path
		{"not a map", []byte{0x00}},                         // declined by the fast path
		{"long head", []byte{0xa1, 0x18, 0x01, 0x61, 0x00}}, // key 1 in two bytes: declined
	}
	for _, update := range []bool{false, true} {
		for _, c := range cases {
			name := c.name
			if update {
				name = "update-topics/" + name
			}
			t.Run(name, func(t *testing.T) {
				body := hostileTopicsBody(t, update, MaxArrayElements, c.elem)
				f := &Frame{Type: TypeRegister, Body: body}
				var err error
				var m0, m1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m0)
				if update {
					f.Type = TypeUpdateTopics
					var u UpdateTopics
					err = f.DecodeUpdateTopics(&u)
				} else {
					var r Register
					err = f.DecodeRegister(&r)
				}
				runtime.ReadMemStats(&m1)
				alloc := m1.TotalAlloc - m0.TotalAlloc
				t.Logf("%d-byte body: %d bytes allocated (%.2fx)", len(body), alloc, float64(alloc)/float64(len(body)))
				if limit := 4 * uint64(len(body)); alloc > limit {
					t.Errorf("decoding a %d-byte body allocated %d bytes (%.1fx), want at most %d",
						len(body), alloc, float64(alloc)/float64(len(body)), limit)
				}
				var we *Error
				if !errors.As(err, &we) || we.Code != CodeBadRequest {
					t.Errorf("decode error %v, want code %d", err, CodeBadRequest)
					return
				}
				if !strings.HasPrefix(we.Message, "invalid argument: invalid topic name") {
					t.Errorf("error %q, want the node's invalid topic name error", we.Message)
				}
			})
		}
	}
}

// TestDecodeUpdateTopicsHostileRemoveBounded: an update-topics whose
// Remove list holds MaxArrayElements names that are not valid topic names
// (one byte each) is refused while decoding, as the node refuses such a
// name, without allocating 16 bytes a declared name (the general decoder,
// for a list the fast path declines, about 50).
func TestDecodeUpdateTopicsHostileRemoveBounded(t *testing.T) {
	for _, c := range []struct {
		name string
		elem []byte
	}{
		{"empty name", []byte{0x60}},
		{"bad character", []byte{0x61, '.'}},
		{"not a text", []byte{0x00}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := Marshal(&UpdateTopics{Cluster: "c", Addr: "127.0.0.1:10911", Epoch: 1})
			if err != nil {
				t.Fatal(err)
			}
			b[0] = 0xa5 // keys 1 to 4, and key 6 last
			b = appendHead(append(b, 0x06), 0x80, MaxArrayElements)
			for range MaxArrayElements {
				b = append(b, c.elem...)
			}
			f := &Frame{Type: TypeUpdateTopics, Body: b}
			var u UpdateTopics
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			err = f.DecodeUpdateTopics(&u)
			runtime.ReadMemStats(&m1)
			alloc := m1.TotalAlloc - m0.TotalAlloc
			t.Logf("%d-byte body: %d bytes allocated (%.2fx)", len(b), alloc, float64(alloc)/float64(len(b)))
			if limit := 4 * uint64(len(b)); alloc > limit {
				t.Errorf("decoding a %d-byte body allocated %d bytes (%.1fx), want at most %d",
					len(b), alloc, float64(alloc)/float64(len(b)), limit)
			}
			var we *Error
			if !errors.As(err, &we) || we.Code != CodeBadRequest || !strings.HasPrefix(we.Message, "invalid argument: invalid topic name") {
				t.Errorf("decode error %v, want the node's invalid topic name error", err)
			}
		})
	}
}
