package wire

import (
	"github.com/fxamacker/cbor/v2"
	"sync"

	"encoding/hex"
	"strings"
	"testing"
)

// FuzzDupKeys checks the duplicate-key walk against the CBOR library's own
// check, which holds everywhere when it decodes into an empty interface:
// on every input the library decodes, both agree on whether a map holds a
// key twice.
func FuzzDupKeys(f *testing.F) {
	for _, h := range []string{
		"a2 01 01 02 02", "a2 01 01 01 02", "a2 01 01 1801 02", "a1 09 a2 6178 00 6178 01",
		"82 a1 01 01 a1 01 01", "a2 20 00 20 01", "a2 40 00 40 01", "a2 4100 00 6100 01",
		"a1 a1 01 01 00", "a2 a1 01 01 00 a1 01 01 00", "a2 f5 00 f5 01", "a2 f94000 00 f94000 01",
		"a2 1801 00 01 00", "a3 01 00 02 00 01 00", "a3 6161 00 6162 00 6161 00", "a2 6162 00 6161 00",
		"a2 00 00 20 00", "a3 20 00 00 00 20 00", "a2 4161 00 6161 00", "a2 6161 00 4161 00",
		"a2 f97e00 00 f97e00 00", "a2 f90000 00 f98000 00", "a2 01 a2 01 00 01 00 01 00",
		"a2 80 00 80 00", "a2 01 00 80 00", "a2 6161 a1 00 00 6161 a1 00 00",
		"a2 01 6b 02 00",
	} {
		b, err := hex.DecodeString(strings.ReplaceAll(h, " ", ""))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, n := range []int{15, 16, 17, 40} {
		f.Add(sortedMap(n, -1))
		f.Add(sortedMap(n, n-1))
		f.Add(sortedMap(n, 0))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkWalkAgainstReference(t, b)
		var v any
		libErr := libDupMode().Unmarshal(b, &v)
		if libErr != nil && !strings.Contains(libErr.Error(), "duplicate map key") {
			return // malformed otherwise: the walk only runs on what decodes
		}
		walkErr := checkDupKeys(b)
		if (libErr != nil) != (walkErr != nil) {
			t.Fatalf("%x: library says %v, walk says %v", b, libErr, walkErr)
		}
	})
}

// libDupMode is the package's decoding mode with the CBOR library's own
// duplicate-key check, which the package leaves to checkDupKeys: the
// reference FuzzDupKeys holds the walk to.
var libDupMode = sync.OnceValue(func() cbor.DecMode {
	opts := decMode.DecOptions()
	opts.DupMapKey = cbor.DupMapKeyEnforcedAPF
	m, err := opts.DecMode()
	if err != nil {
		panic(err)
	}
	return m
})

// sortedMap encodes a map of n integer keys 0, 1, ... in order, with key
// dup repeated at the end instead of the last key when dup >= 0.
func sortedMap(n, dup int) []byte {
	b := appendHead(nil, 0xa0, uint64(n))
	for i := range n {
		k := i
		if i == n-1 && dup >= 0 {
			k = dup
		}
		b = appendUint(b, uint64(k))
		b = append(b, 0xf6)
	}
	return b
}

// checkWalkAgainstReference compares the walk, which compares keys in
// ascending order only with their predecessor, with the reference walk
// that compares every key with every other: the same verdict and the same
// error, for a value and for a frame, on any input.
func checkWalkAgainstReference(t *testing.T, b []byte) {
	t.Helper()
	for _, frame := range []bool{false, true} {
		got := checkKeys(b, walker{check: true, frame: frame})
		want := checkKeys(b, walker{check: true, frame: frame, anyOrder: true})
		if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
			t.Fatalf("%x (frame %v): walk says %v, reference walk %v", b, frame, got, want)
		}
	}
}

// TestDupKeysOrder: duplicates are found whatever the order of the keys,
// in maps of either side of the size where the reference walk changes
// from comparing keys pairwise to a set; sorted maps pass.
func TestDupKeysOrder(t *testing.T) {
	for _, h := range []struct {
		hex string
		dup bool
	}{
		{"a3 01 00 02 00 03 00", false},
		{"a3 01 00 02 00 01 00", true},
		{"a2 1801 00 01 00", true}, // one key in two widths, the wider first
		{"a2 01 00 1801 00", true}, // and the narrower first
		{"a3 6161 00 6162 00 6161 00", true},
		{"a2 6162 00 6161 00", false}, // out of order, distinct
		{"a2 4161 00 6161 00", false}, // byte and text string: two keys
		{"a2 00 00 20 00", false},     // 0 and -1
		{"a2 20 00 20 00", true},
		{"a2 f90000 00 f98000 00", true},     // 0.0 and -0.0
		{"a2 f97e00 00 f97e00 00", false},    // NaN is never equal to itself
		{"a3 01 00 f5 00 01 00", true},       // a key of another kind between
		{"a2 01 a2 01 00 01 00 02 00", true}, // inside a value
	} {
		b := unhex(t, h.hex)
		checkWalkAgainstReference(t, b)
		if err := checkDupKeys(b); (err != nil) != h.dup {
			t.Errorf("%s: %v, want a duplicate: %v", h.hex, err, h.dup)
		}
	}
	for _, n := range []int{2, 15, 16, 17, 40, 1000} {
		if err := checkDupKeys(sortedMap(n, -1)); err != nil {
			t.Errorf("%d sorted keys: %v", n, err)
		}
		for _, dup := range []int{0, (n - 1) / 2, n - 2} {
			b := sortedMap(n, dup)
			checkWalkAgainstReference(t, b)
			if err := checkDupKeys(b); err == nil {
				t.Errorf("%d keys, key %d twice: no error", n, dup)
			}
		}
	}
}
