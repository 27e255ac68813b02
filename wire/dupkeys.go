package wire

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// The CBOR library refuses duplicate keys only in maps it decodes into Go
// values; a map inside an unknown field, or inside an embedded item kept
// as raw bytes, is skipped unchecked. PROTOCOL.md §3.2 refuses duplicates
// everywhere, so checkDupKeys walks the whole data item once.

var errMalformed = errors.New("cbor: malformed data item")

// checkDupKeys reports the first map in the CBOR data item b, at any depth,
// that holds a key twice. b has passed the decoder already, so it is one
// well-formed item of definite lengths nested at most MaxNestingLevel deep;
// the walk still checks bounds rather than trust that.
func checkDupKeys(b []byte) error { return checkKeys(b, walker{check: true}) }

// checkFrameKeys is checkDupKeys for a Frame map, leaving the body (key 3)
// to DecodeBody, so that a body with a duplicate key is answered as a bad
// body, with the request's type and id (PROTOCOL.md §2.2).
func checkFrameKeys(b []byte) error { return checkKeys(b, walker{check: true, frame: true}) }

func checkKeys(b []byte, w walker) error {
	rest, err := w.item(b, 0)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return errMalformed
	}
	return nil
}

// head splits off an item's initial byte and argument.
func head(b []byte) (major byte, arg uint64, rest []byte, err error) {
	if len(b) == 0 {
		return 0, 0, nil, errMalformed
	}
	major, ai := b[0]>>5, b[0]&0x1f
	b = b[1:]
	switch {
	case ai < 24:
		return major, uint64(ai), b, nil
	case ai == 24 && len(b) >= 1:
		return major, uint64(b[0]), b[1:], nil
	case ai == 25 && len(b) >= 2:
		return major, uint64(binary.BigEndian.Uint16(b)), b[2:], nil
	case ai == 26 && len(b) >= 4:
		return major, uint64(binary.BigEndian.Uint32(b)), b[4:], nil
	case ai == 27 && len(b) >= 8:
		return major, binary.BigEndian.Uint64(b), b[8:], nil
	}
	return 0, 0, nil, errMalformed // reserved, indefinite or truncated
}

// walker skips items, checking their maps when check is set; with frame
// set, the value of key 3 of the outermost map is skipped unchecked. With
// anyOrder set it compares every key of a map with every other, sorted
// or not: the reference the tests hold the faster walk of sorted maps to.
type walker struct{ check, frame, anyOrder bool }

// item skips one item, checking the maps in it, and returns the rest.
func (w walker) item(b []byte, depth int) ([]byte, error) {
	major, arg, rest, err := head(b)
	if err != nil {
		return nil, err
	}
	switch major {
	case 0, 1, 7: // integers, simple values and floats: the argument is all
		return rest, nil
	case 2, 3:
		if arg > uint64(len(rest)) {
			return nil, errMalformed
		}
		return rest[arg:], nil
	}
	if depth >= MaxNestingLevel {
		return nil, errMalformed
	}
	switch major {
	case 4:
		for range arg {
			var ok bool
			if rest, ok = skipSmall(rest); ok {
				continue
			}
			if rest, err = w.item(rest, depth+1); err != nil {
				return nil, err
			}
		}
		return rest, nil
	case 5:
		return w.mapPairs(rest, arg, depth)
	}
	return w.item(rest, depth+1) // a tag: its content
}

// mapKey is a key as compared for duplicates, by value as the CBOR data
// model has it (and as the library compares the keys it decodes):
// integers whatever their encoding's width, strings by content, floats as
// float64 whatever their precision (so 2.0 in half and single precision is
// one key, and NaN is never equal to itself), null and undefined as one,
// anything else by its bytes.
type mapKey struct {
	major byte
	n     uint64
	f     float64
	s     string
}

func keyOf(item []byte) mapKey {
	major, arg, rest, _ := head(item)
	switch major {
	case 0, 1:
		return mapKey{major: major, n: arg}
	case 2, 3:
		return mapKey{major: major, s: string(rest[:arg])}
	case 7:
		switch item[0] & 0x1f {
		case 25:
			return mapKey{major: 8, f: halfToFloat(uint16(arg))}
		case 26:
			return mapKey{major: 8, f: float64(math.Float32frombits(uint32(arg)))}
		case 27:
			return mapKey{major: 8, f: math.Float64frombits(arg)}
		}
		if arg == 23 {
			arg = 22 // undefined decodes as null: one key
		}
		return mapKey{major: 7, n: arg}
	}
	return mapKey{major: 0xff, s: string(item)}
}

// halfToFloat converts an IEEE 754 half-precision number.
func halfToFloat(h uint16) float64 {
	sign, exp, frac := h>>15, int(h>>10)&0x1f, float64(h&0x3ff)
	var v float64
	switch exp {
	case 0:
		v = math.Ldexp(frac, -24)
	case 0x1f:
		v = math.Inf(1)
		if frac != 0 {
			v = math.NaN()
		}
	default:
		v = math.Ldexp(1024+frac, exp-25)
	}
	if sign != 0 {
		v = -v
	}
	return v
}

// mapPairs skips a map's pairs, checking its keys. Keys in strictly
// ascending order (integers by value, then strings by length and bytes,
// as the deterministic encoding sorts them, so every map edgereg itself
// encodes) cannot repeat, so it only compares each key with the one
// before it; at the first key out of that order it starts the map over
// with mapPairsAnyOrder, which remembers every key. The restart walks the
// same bytes in the same order, so it finds the same error first.
func (w walker) mapPairs(b []byte, pairs uint64, depth int) ([]byte, error) {
	if !w.check || w.anyOrder {
		return w.mapPairsAnyOrder(b, pairs, depth)
	}
	start := b
	var last orderKey
	for i := range pairs {
		var k orderKey
		var rest []byte
		if len(b) > 0 && b[0] < 0x78 && b[0]&0x1f < 24 {
			// An integer or string with its argument in the initial
			// byte, as the keys of every message's map are.
			k.kind, k.n = b[0]>>5, uint64(b[0]&0x1f)
			rest = b[1:]
			if k.kind >= 2 {
				if k.n > uint64(len(rest)) {
					return nil, errMalformed
				}
				k.s, rest = rest[:k.n], rest[k.n:]
			}
		} else {
			var err error
			if rest, err = w.item(b, depth+1); err != nil {
				return nil, err
			}
			var ok bool
			if k, ok = orderKeyOf(b[:len(b)-len(rest)]); !ok {
				return w.mapPairsAnyOrder(start, pairs, depth)
			}
		}
		if i > 0 && !last.less(&k) {
			return w.mapPairsAnyOrder(start, pairs, depth)
		}
		last = k
		var ok bool
		if b, ok = skipSmall(rest); ok {
			continue
		}
		value := w
		if w.frame && depth == 0 && k.kind == 0 && k.n == 3 {
			value.check = false // the body: DecodeBody checks it
		}
		value.frame = false
		var err error
		if b, err = value.item(rest, depth+1); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// skipSmall skips an item whose argument is in its initial byte and that
// holds no other item (an integer from -24 to 23, a string of up to 23
// bytes, a simple value), and reports whether it did: most items of every
// message, skipped without a call.
func skipSmall(b []byte) ([]byte, bool) {
	if len(b) == 0 {
		return b, false
	}
	c := b[0]
	switch {
	case c < 0x38: // major types 0 and 1; 0x18-0x1f and 0x38-0x3f have arguments
		if c&0x1f < 24 {
			return b[1:], true
		}
	case c < 0x78: // major types 2 and 3
		if n := int(c & 0x1f); n < 24 && n < len(b) {
			return b[1+n:], true
		}
	case c >= 0xe0 && c < 0xf8: // simple values
		return b[1:], true
	}
	return b, false
}

// orderKey is a map key that orders as the deterministic encoding sorts
// keys, for the kinds where equal keys are equal orderKeys: an integer
// (kind 0 or 1, n its argument) or a byte or text string (kind 2 or 3, n
// its length, s its content).
type orderKey struct {
	kind byte
	n    uint64
	s    []byte
}

func (k *orderKey) less(o *orderKey) bool {
	if k.kind != o.kind {
		return k.kind < o.kind
	}
	if k.n != o.n {
		return k.n < o.n
	}
	return k.kind >= 2 && bytes.Compare(k.s, o.s) < 0
}

// orderKeyOf returns the orderKey of a key item that passed w.item; ok is
// false for keys of other kinds (floats, simple values, arrays, maps).
func orderKeyOf(item []byte) (orderKey, bool) {
	major, arg, rest, err := head(item)
	switch {
	case err != nil:
		return orderKey{}, false
	case major == 0 || major == 1:
		return orderKey{kind: major, n: arg}, true
	case major == 2 || major == 3:
		return orderKey{kind: major, n: arg, s: rest[:arg]}, true
	}
	return orderKey{}, false
}

// mapPairsAnyOrder skips a map's pairs, comparing each key with every
// key before it. It remembers each key by where it lies in b (8 bytes a
// key, never a copy of it: a pair takes at least 2 bytes), comparing the
// first 16 with each other as it goes and, in a larger map, the others
// once the walk is over, by sorting them: either way it reports the pair
// a walk comparing each key with all before it would stop at first.
func (w walker) mapPairsAnyOrder(b []byte, pairs uint64, depth int) ([]byte, error) {
	all := b
	var small [16]keyAt
	keys := small[:0]
	var stop error // the walk's own error, at pair len(keys) or its value
	for i := range pairs {
		rest, err := w.item(b, depth+1)
		if err != nil {
			stop = err
			break
		}
		if !w.check {
			if b, err = w.item(rest, depth+1); err != nil {
				return nil, err
			}
			continue
		}
		k := keyAt{start: uint32(len(all) - len(b)), end: uint32(len(all) - len(rest))}
		switch {
		case len(keys) < len(small):
			for _, o := range keys {
				if sameKey(all, o, k) {
					return nil, dupKeyError(i)
				}
			}
		case len(keys) == len(small):
			// Sized by the bytes left, two at least a pair, never by
			// the count the map's head declares.
			grown := make([]keyAt, len(keys), min(pairs, uint64(len(all))/2))
			copy(grown, keys)
			keys = grown
		}
		keys = append(keys, k)
		value := w
		if w.frame && depth == 0 && isKey3(b[:len(b)-len(rest)]) {
			value.check = false // the body: DecodeBody checks it
		}
		value.frame = false
		if b, err = value.item(rest, depth+1); err != nil {
			stop = err
			break
		}
	}
	// Every key remembered comes before the item that stopped the walk
	// (a key's duplicate is found before its value is walked), so a
	// duplicate among them is what a pair-by-pair walk meets first.
	if len(keys) > len(small) {
		if dup, ok := firstDuplicate(all, keys); ok {
			return nil, dupKeyError(dup)
		}
	}
	if stop != nil {
		return nil, stop
	}
	return b, nil
}

func dupKeyError(index uint64) error {
	return fmt.Errorf("cbor: found duplicate map key at map element index %d", index)
}

// keyAt is a map key by where it lies: b[start:end].
type keyAt struct{ start, end uint32 }

// sameKey reports whether keys x and y of b are equal by value (keyOf).
func sameKey(b []byte, x, y keyAt) bool {
	kx, ky := b[x.start:x.end], b[y.start:y.end]
	return compareKeys(kx, ky) == 0 && !isNaNKey(kx)
}

// isKey3 reports whether item is the integer 3, in any width.
func isKey3(item []byte) bool {
	major, arg, _, err := head(item)
	return err == nil && major == 0 && arg == 3
}

// isNaNKey reports whether item is a floating-point NaN, a key equal to
// no other, itself included.
func isNaNKey(item []byte) bool {
	k, _ := keyView(item)
	return k.major == 8 && math.IsNaN(k.f)
}

// firstDuplicate returns the index of the first pair whose key equals the
// key of a pair before it, keys being every pair's key in order. It sorts
// keys.
func firstDuplicate(b []byte, keys []keyAt) (uint64, bool) {
	slices.SortFunc(keys, func(x, y keyAt) int {
		if c := compareKeys(b[x.start:x.end], b[y.start:y.end]); c != 0 {
			return c
		}
		return cmp.Compare(x.start, y.start)
	})
	first, found := uint32(0), false
	for i := 1; i < len(keys); i++ {
		if y := keys[i]; sameKey(b, keys[i-1], y) && (!found || y.start < first) {
			first, found = y.start, true
		}
	}
	if !found {
		return 0, false
	}
	index := uint64(0) // the pairs before it
	for _, k := range keys {
		if k.start < first {
			index++
		}
	}
	return index, true
}

// compareKeys orders two key items by their mapKey (keyOf), without
// copying them: 0 exactly when keyOf gives equal keys, or both are NaN
// (which sameKey still tells apart: NaN equals nothing).
func compareKeys(x, y []byte) int {
	kx, sx := keyView(x)
	ky, sy := keyView(y)
	if c := cmp.Compare(kx.major, ky.major); c != 0 {
		return c
	}
	if c := cmp.Compare(kx.n, ky.n); c != 0 {
		return c
	}
	if c := cmp.Compare(kx.f, ky.f); c != 0 { // NaN first, -0 equal to 0
		return c
	}
	return bytes.Compare(sx, sy)
}

// keyView is keyOf with the string part left in item, not copied.
func keyView(item []byte) (mapKey, []byte) {
	major, arg, rest, _ := head(item)
	switch major {
	case 2, 3:
		return mapKey{major: major}, rest[:arg]
	case 0, 1, 7:
		return keyOf(item), nil
	}
	return mapKey{major: 0xff}, item
}
