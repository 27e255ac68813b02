package wire

import "math"

// The hand-written frame decoder. Every request and response passes
// DecodeFrame, and the reflection decoder spends most of its time on
// generic machinery (and, on a fresh goroutine, on growing the stack
// inside reflect) for a map of three small keys. decodeFrameFast reads
// the frames the protocol's peers send and says "not mine" for anything
// else; the reflection decoder (unmarshalFrame) then decides, so the
// bytes accepted and refused, the values decoded and the error texts are
// the same on either path. FuzzFrameDecode compares the two.

// decodeFrameFast decodes b into f when b is a frame of the common shape
// and reports whether it did; when it reports false it has not touched f.
// The common shape:
//
//   - a map of at most three pairs, its length in the initial byte;
//   - keys 1 (type), 2 (id) and 3 (body) in the one-byte form, each at
//     most once, in any order; no key 4 (an error: the reflection path
//     decodes those) and no unknown key;
//   - type and id unsigned integers of any width, type at most 0xffff;
//   - the body one well-formed data item that is not a simple value or a
//     float at the top (those, null above all, the reflection decoder
//     treats specially), with definite lengths, no tags, no simple values
//     other than false, true, null and undefined, at most MaxNestingLevel
//     deep counting the frame map, and arrays and maps within
//     MaxArrayElements and MaxMapPairs;
//   - nothing after the map.
//
// As with the reflection decoder, a field whose key is absent keeps the
// value it had in f, and keys inside the body are not checked for
// duplicates here (DecodeBody refuses those as a bad body, with the
// request's type and id). Unlike the reflection decoder, which copies the
// body, f.Body is a sub-slice of b.
func decodeFrameFast(b []byte, f *Frame) bool {
	if len(b) == 0 || b[0] < 0xa0 || b[0] > 0xa3 {
		return false
	}
	pairs := int(b[0] & 0x1f)
	b = b[1:]
	var (
		typ, id uint64
		body    []byte
		seen    uint8
		ok      bool
	)
	for range pairs {
		if len(b) == 0 {
			return false
		}
		key := b[0]
		if key < 1 || key > 3 || seen&(1<<key) != 0 {
			return false
		}
		seen |= 1 << key
		b = b[1:]
		switch key {
		case 1:
			if typ, b, ok = readUint(b, 0xffff); !ok {
				return false
			}
		case 2:
			if id, b, ok = readUint(b, math.MaxUint64); !ok {
				return false
			}
		case 3:
			if len(b) == 0 || b[0]>>5 >= 6 {
				return false // a tag, a simple value or a float
			}
			rest, ok := skipRaw(b, 1)
			if !ok {
				return false
			}
			body, b = b[:len(b)-len(rest)], rest
		}
	}
	if len(b) != 0 {
		return false
	}
	if seen&(1<<1) != 0 {
		f.Type = Type(typ)
	}
	if seen&(1<<2) != 0 {
		f.ID = id
	}
	if seen&(1<<3) != 0 {
		f.Body = body
	}
	return true
}

// skipRaw skips one data item inside a container nested depth deep and
// returns what follows it; ok is false for anything the CBOR library's
// well-formedness check might refuse or treat otherwise (see
// decodeFrameFast), never for something it only might accept.
func skipRaw(b []byte, depth int) (rest []byte, ok bool) {
	if len(b) == 0 {
		return nil, false
	}
	major := b[0] >> 5
	if major == 7 {
		switch b[0] & 0x1f {
		case 20, 21, 22, 23: // false, true, null, undefined
			return b[1:], true
		case 25:
			return b[min(3, len(b)):], len(b) >= 3
		case 26:
			return b[min(5, len(b)):], len(b) >= 5
		case 27:
			return b[min(9, len(b)):], len(b) >= 9
		}
		return nil, false // other simple values, reserved forms, break
	}
	_, arg, b, err := head(b)
	if err != nil {
		return nil, false
	}
	switch major {
	case 0, 1:
		return b, true
	case 2, 3:
		if arg > uint64(len(b)) {
			return nil, false
		}
		return b[arg:], true
	case 4, 5:
		if depth >= MaxNestingLevel {
			return nil, false
		}
		n := arg
		if major == 5 {
			if n > MaxMapPairs {
				return nil, false
			}
			n *= 2
		} else if n > MaxArrayElements {
			return nil, false
		}
		for range n {
			// Integers and strings with their argument in the initial
			// byte, most items of every body, without a call.
			if len(b) > 0 && b[0] < 0x78 && b[0]&0x1f < 24 {
				if b[0] < 0x40 {
					b = b[1:]
					continue
				}
				if m := int(b[0] & 0x1f); m < len(b) {
					b = b[1+m:]
					continue
				}
				return nil, false
			}
			if b, ok = skipRaw(b, depth+1); !ok {
				return nil, false
			}
		}
		return b, true
	}
	return nil, false // a tag
}

// DecodeRoutesFrame decodes b, a frame's bytes, into f and its body into
// r, when b is a get-routes answer as a node sends it: the map {1: type,
// 2: id, 3: body}, those keys in that order, id equal to want (the
// request's), and a body the routes decoder reads by hand
// (routes_decode.go). It walks the body once, where DecodeFrame and then
// Frame.DecodeRoutes walk it twice: everything the routes decoder takes,
// DecodeFrame's well-formedness walk takes too, so f and r end as those
// two would leave them (FuzzDecodeRoutesFrame compares them).
//
// checks, when not nil, lets it skip walking routes it walked before
// (RouteChecks).
//
// When it reports false nothing is decided: the caller decodes b with
// DecodeFrame and then Frame.DecodeRoutes, which give the errors. It may
// have written into r's Results and Groups arrays, as a DecodeRoutes that
// fails may.
func DecodeRoutesFrame(b []byte, want uint64, f *Frame, r *Routes, checks *RouteChecks) bool {
	if len(b) < 7 || b[0] != 0xa3 || b[1] != 1 {
		return false
	}
	typ, rest, ok := readUint(b[2:], 0xffff)
	if !ok || len(rest) == 0 || rest[0] != 2 {
		return false
	}
	id, rest, ok := readUint(rest[1:], math.MaxUint64)
	if !ok || id != want || len(rest) == 0 || rest[0] != 3 {
		return false
	}
	body := rest[1:]
	if !decodeRoutesChecked(body, r, checks) {
		return false
	}
	f.Type, f.ID, f.Body = Type(typ), id, body
	return true
}
