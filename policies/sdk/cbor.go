package sdk

import "errors"

// A tiny CBOR codec for the ABI's messages: unsigned and negative
// integers, text strings, arrays, maps, null, and skipping anything else
// the host may add in a later minor version. It exists because a general
// codec pulls reflection into the guest and doubles its size.

var (
	errTruncated = errors.New("cbor: truncated input")
	errType      = errors.New("cbor: unexpected type")
	errTooDeep   = errors.New("cbor: nesting too deep")
	errRange     = errors.New("cbor: integer out of range")
)

const (
	majorUint  = 0
	majorNeg   = 1
	majorBytes = 2
	majorText  = 3
	majorArray = 4
	majorMap   = 5
	majorTag   = 6
	majorOther = 7

	cborNull = 0xf6
	maxDepth = 16
)

// decoder reads CBOR from b; the first error sticks and every later read
// returns zero values.
type decoder struct {
	b   []byte
	i   int
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

// head reads an item's initial byte and argument.
func (d *decoder) head() (major byte, arg uint64) {
	if d.err != nil {
		return 0, 0
	}
	if d.i >= len(d.b) {
		d.fail(errTruncated)
		return 0, 0
	}
	c := d.b[d.i]
	d.i++
	major, info := c>>5, c&31
	switch {
	case info < 24:
		return major, uint64(info)
	case info <= 27:
		n := 1 << (info - 24)
		if len(d.b)-d.i < n {
			d.fail(errTruncated)
			return 0, 0
		}
		for _, x := range d.b[d.i : d.i+n] {
			arg = arg<<8 | uint64(x)
		}
		d.i += n
		return major, arg
	}
	d.fail(errType) // indefinite lengths and reserved values
	return 0, 0
}

func (d *decoder) isNull() bool {
	if d.err == nil && d.i < len(d.b) && d.b[d.i] == cborNull {
		d.i++
		return true
	}
	return false
}

func (d *decoder) uint() uint64 {
	m, a := d.head()
	if m != majorUint {
		d.fail(errType)
		return 0
	}
	return a
}

func (d *decoder) int() int64 {
	m, a := d.head()
	if a > 1<<63-1 {
		d.fail(errRange)
		return 0
	}
	switch m {
	case majorUint:
		return int64(a)
	case majorNeg:
		return -1 - int64(a)
	}
	d.fail(errType)
	return 0
}

func (d *decoder) text() string {
	m, n := d.head()
	if m != majorText {
		d.fail(errType)
		return ""
	}
	if uint64(len(d.b)-d.i) < n {
		d.fail(errTruncated)
		return ""
	}
	s := string(d.b[d.i : d.i+int(n)])
	d.i += int(n)
	return s
}

// length reads an array or map header; null counts as empty. Lengths
// beyond what the remaining bytes could hold are refused before any
// allocation.
func (d *decoder) length(major byte) int {
	if d.isNull() {
		return 0
	}
	m, n := d.head()
	if m != major {
		d.fail(errType)
		return 0
	}
	if n > uint64(len(d.b)-d.i) {
		d.fail(errTruncated)
		return 0
	}
	return int(n)
}

// fields calls fn for each key of a map with integer keys; fn must read
// the value (or call skip).
func (d *decoder) fields(fn func(key uint64)) {
	n := d.length(majorMap)
	for range n {
		if d.err != nil {
			return
		}
		fn(d.uint())
	}
}

// skip reads and discards one item.
func (d *decoder) skip() { d.skipDepth(0) }

func (d *decoder) skipDepth(depth int) {
	if depth > maxDepth {
		d.fail(errTooDeep)
		return
	}
	m, a := d.head()
	switch m {
	case majorBytes, majorText:
		if uint64(len(d.b)-d.i) < a {
			d.fail(errTruncated)
			return
		}
		d.i += int(a)
	case majorArray, majorMap:
		n := a
		if m == majorMap {
			n *= 2
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			d.skipDepth(depth + 1)
		}
	case majorTag:
		d.skipDepth(depth + 1)
	}
}

// encoder appends CBOR to b in preferred (shortest) form.
type encoder struct{ b []byte }

func (e *encoder) head(major byte, arg uint64) {
	m := major << 5
	switch {
	case arg < 24:
		e.b = append(e.b, m|byte(arg))
	case arg <= 0xff:
		e.b = append(e.b, m|24, byte(arg))
	case arg <= 0xffff:
		e.b = append(e.b, m|25, byte(arg>>8), byte(arg))
	case arg <= 0xffffffff:
		e.b = append(e.b, m|26, byte(arg>>24), byte(arg>>16), byte(arg>>8), byte(arg))
	default:
		e.b = append(e.b, m|27, byte(arg>>56), byte(arg>>48), byte(arg>>40), byte(arg>>32),
			byte(arg>>24), byte(arg>>16), byte(arg>>8), byte(arg))
	}
}

func (e *encoder) uint(v uint64) { e.head(majorUint, v) }

func (e *encoder) int(v int64) {
	if v < 0 {
		e.head(majorNeg, uint64(-1-v))
		return
	}
	e.head(majorUint, uint64(v))
}

func (e *encoder) text(s string) {
	e.head(majorText, uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) array(n int) { e.head(majorArray, uint64(n)) }
func (e *encoder) mapn(n int)  { e.head(majorMap, uint64(n)) }
