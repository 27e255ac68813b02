package wire

import "testing"

func TestArrayLen(t *testing.T) {
	for _, c := range []struct {
		name string
		hex  []byte
		key  uint64
		n    uint64
		ok   bool
	}{
		{"key 1 array", []byte{0xa1, 0x01, 0x83, 1, 2, 3}, 1, 3, true},
		{"after another key", []byte{0xa2, 0x02, 0x82, 0xa0, 0x61, 'x', 0x01, 0x9a, 0, 0x10, 0, 0}, 1, 1 << 20, true},
		{"key absent", []byte{0xa1, 0x02, 0x80}, 1, 0, false},
		{"not an array", []byte{0xa1, 0x01, 0xa0}, 1, 0, false},
		{"not a map", []byte{0x81, 0x01}, 1, 0, false},
		{"text key", []byte{0xa1, 0x61, 'a', 0x80}, 1, 0, false},
		{"truncated", []byte{0xa2, 0x02}, 1, 0, false},
		{"empty", nil, 1, 0, false},
	} {
		n, ok := ArrayLen(c.hex, c.key)
		if n != c.n || ok != c.ok {
			t.Errorf("%s: ArrayLen = %d, %v; want %d, %v", c.name, n, ok, c.n, c.ok)
		}
	}
}
