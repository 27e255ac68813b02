package wire

import "unicode/utf8"

// decodeFrameFast decodes the frame shape every peer of this package
// sends, {1: type, 2: id, 3: body} with keys in ascending order (2 and 3
// optional), without reflection, and reports whether b had that shape. A
// frame with an error (key 4), any other key, or a body outside
// skipPlain's subset is left to the general decoder, which decides what
// it accepts (TestDecodeFrameFast and FuzzDecodeFrameFast compare both).
//
// The general decoder checks the whole frame for well-formedness, then
// decodes it, then walks it again for duplicate keys: three passes over a
// 3 KB registration, half of the node's own work for it. This is one.
func decodeFrameFast(b []byte, f *Frame) bool {
	*f = Frame{}
	m := keyedMap{max: 3}
	rest, ok := m.open(b)
	for ok && m.pairs > 0 {
		var key, v uint64
		if key, rest, ok = m.next(rest); !ok {
			break
		}
		switch key {
		case 1:
			v, rest, ok = readUint(rest, 0xffff)
			f.Type = Type(v)
		case 2:
			f.ID, rest, ok = readUint(rest, 1<<64-1)
		case 3:
			// Null and undefined are left to the general decoder, which
			// has its own view of them as a RawMessage.
			if len(rest) == 0 || rest[0] == 0xf6 || rest[0] == 0xf7 {
				return false
			}
			var end []byte
			if end, ok = skipPlain(rest, 1); ok {
				f.Body = append([]byte(nil), rest[:len(rest)-len(end)]...)
				rest = end
			}
		}
	}
	return ok && len(rest) == 0
}

// skipPlain skips one data item of a conservative subset of what the
// general decoder accepts: integers, byte strings, valid UTF-8 text,
// arrays and maps within the package's limits and nesting, false, true,
// null, undefined and floats; no tags, no indefinite lengths, no other
// simple values. Map keys are not compared: the body's decoder refuses
// duplicates (Frame.DecodeBody and the hand-written ones alike).
func skipPlain(b []byte, depth int) ([]byte, bool) {
	if len(b) == 0 {
		return nil, false
	}
	first := b[0]
	major, arg, rest, err := head(b)
	if err != nil {
		return nil, false
	}
	switch major {
	case 0, 1:
		return rest, true
	case 2, 3:
		if arg > uint64(len(rest)) || (major == 3 && !utf8.Valid(rest[:arg])) {
			return nil, false
		}
		return rest[arg:], true
	case 4, 5:
		items := arg
		if major == 5 {
			items = 2 * arg
		}
		// Each item takes a byte at least: a bound on the loop below
		// that follows the bytes received.
		if depth >= MaxNestingLevel-1 || arg > MaxArrayElements || items > uint64(len(rest)) {
			return nil, false
		}
		ok := true
		for i := uint64(0); i < items && ok; i++ {
			rest, ok = skipPlain(rest, depth+1)
		}
		return rest, ok
	case 7:
		switch first {
		case 0xf4, 0xf5, 0xf6, 0xf7, 0xf9, 0xfa, 0xfb:
			return rest, true
		}
	}
	return nil, false // tags, other simple values
}
