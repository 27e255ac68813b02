package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
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
func checkDupKeys(b []byte) error { return checkKeys(b, false) }

// checkFrameKeys is checkDupKeys for a Frame map, leaving the body (key 3)
// to DecodeBody, so that a body with a duplicate key is answered as a bad
// body, with the request's type and id (PROTOCOL.md §2.2).
func checkFrameKeys(b []byte) error { return checkKeys(b, true) }

func checkKeys(b []byte, frame bool) error {
	w := walker{check: true, frame: frame}
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
// set, the value of key 3 of the outermost map is skipped unchecked.
type walker struct{ check, frame bool }

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

func (w walker) mapPairs(b []byte, pairs uint64, depth int) ([]byte, error) {
	var small [16]mapKey
	keys := small[:0]
	var seen map[mapKey]struct{}
	for i := range pairs {
		rest, err := w.item(b, depth+1)
		if err != nil {
			return nil, err
		}
		if !w.check {
			if b, err = w.item(rest, depth+1); err != nil {
				return nil, err
			}
			continue
		}
		k := keyOf(b[:len(b)-len(rest)])
		if seen == nil && len(keys) == len(small) {
			seen = make(map[mapKey]struct{}, pairs)
			for _, k := range keys {
				seen[k] = struct{}{}
			}
		}
		dup := false
		if seen != nil {
			_, dup = seen[k]
			seen[k] = struct{}{}
		} else {
			for _, o := range keys {
				dup = dup || o == k
			}
			keys = append(keys, k)
		}
		if dup {
			return nil, fmt.Errorf("cbor: found duplicate map key at map element index %d", i)
		}
		value := w
		if w.frame && depth == 0 && k == (mapKey{major: 0, n: 3}) {
			value.check = false // the body: DecodeBody checks it
		}
		value.frame = false
		if b, err = value.item(rest, depth+1); err != nil {
			return nil, err
		}
	}
	return b, nil
}
