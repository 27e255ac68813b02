package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

// Fuzz targets for every decoder of the package. Seeds come from the test
// vectors (testdata/wire) and from the committed corpora under
// testdata/fuzz/<target>/. Run one at a time, e.g.
//
//	go test ./wire -run '^$' -fuzz '^FuzzReadFrame$' -fuzztime 60s -parallel 1

// fuzzFrameLimit is the limit FuzzReadFrame reads with: small, so that the
// fuzzer reaches the over-limit path easily.
const fuzzFrameLimit = 64 << 10

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func FuzzReadFrame(f *testing.F) {
	for _, s := range fuzzSeedsFromVectors(f).frames {
		f.Add(s.data)
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xa0})
	f.Add([]byte{0, 1, 0, 1, 0xa0})
	f.Add([]byte{0, 0, 0, 2, 0xbf, 0xff})

	f.Fuzz(func(t *testing.T, data []byte) {
		cr := &countingReader{r: bytes.NewReader(data)}
		fr, err := ReadFrame(cr, fuzzFrameLimit)

		// Framing: how much was read, and which error.
		var n int
		if len(data) >= FrameHeaderLen {
			n = int(uint32(data[0])<<24 | uint32(data[1])<<16 | uint32(data[2])<<8 | uint32(data[3]))
		}
		switch {
		case len(data) == 0:
			if err != io.EOF {
				t.Fatalf("empty input: %v, want io.EOF", err)
			}
			return
		case len(data) < FrameHeaderLen:
			if err != io.ErrUnexpectedEOF {
				t.Fatalf("%d-byte input: %v, want io.ErrUnexpectedEOF", len(data), err)
			}
			return
		case n == 0:
			if !errors.Is(err, ErrEmptyFrame) || cr.n != FrameHeaderLen {
				t.Fatalf("zero length: %v after %d bytes", err, cr.n)
			}
			return
		case n > fuzzFrameLimit:
			var tl *FrameTooLargeError
			if !errors.As(err, &tl) || tl.Len != n || tl.Limit != fuzzFrameLimit {
				t.Fatalf("length %d over the limit: %v", n, err)
			}
			if cr.n != FrameHeaderLen {
				t.Fatalf("read %d bytes of a refused frame, want only its header", cr.n)
			}
			return
		case len(data) < FrameHeaderLen+n:
			if err != io.ErrUnexpectedEOF {
				t.Fatalf("truncated frame: %v, want io.ErrUnexpectedEOF", err)
			}
			return
		}
		if cr.n != FrameHeaderLen+n {
			t.Fatalf("read %d bytes of a %d-byte frame", cr.n, FrameHeaderLen+n)
		}
		if err != nil {
			return // malformed CBOR: refused, and nothing panicked
		}

		// A frame that decodes re-encodes to a stable form.
		enc, err := AppendFrame(nil, &fr)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", fr, err)
		}
		fr2, err := ReadFrame(bytes.NewReader(enc), MaxFrameLen)
		if err != nil {
			t.Fatalf("decode the re-encoding %x: %v", enc, err)
		}
		if !reflect.DeepEqual(fr, fr2) {
			t.Fatalf("decoded %+v, after re-encoding %+v", fr, fr2)
		}
		enc2, err := AppendFrame(nil, &fr2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable: %x then %x (%v)", enc, enc2, err)
		}

		// The body, if any, decodes or is refused as a bad request.
		if bt, ok := messageBodies[fr.Type]; ok {
			for _, mk := range []func() any{bt.req, bt.resp} {
				if mk != nil {
					if err := fr.DecodeBody(mk()); err != nil && !errors.Is(err, ErrBadRequest) {
						t.Fatalf("DecodeBody error %v is not a bad request", err)
					}
				}
			}
		}
	})
}

// allBodyTypes lists a constructor for every body type, for message type
// numbers the protocol does not know.
func allBodyTypes() []func() any {
	var out []func() any
	seen := make(map[string]bool)
	for _, typ := range allTypes() {
		for _, mk := range []func() any{messageBodies[typ].req, messageBodies[typ].resp} {
			if mk != nil && !seen[typeName(mk())] {
				seen[typeName(mk())] = true
				out = append(out, mk)
			}
		}
	}
	return out
}

// checkStable re-encodes a decoded value v and decodes the result into a
// fresh value from mk, twice: after the first round (which may turn an
// absent or null list into an empty one, as the encoder never sends null)
// values and bytes must not change any more.
func checkStable(t *testing.T, mk func() any, v any) {
	t.Helper()
	roundTrip := func(v any) ([]byte, any) {
		enc, err := Marshal(v)
		if err != nil {
			t.Fatalf("re-encode %#v: %v", v, err)
		}
		v2 := mk()
		if err := Unmarshal(enc, v2); err != nil {
			t.Fatalf("decode the re-encoding %x of %#v: %v", enc, v, err)
		}
		return enc, v2
	}
	enc1, v2 := roundTrip(v)
	enc2, v3 := roundTrip(v2)
	if !reflect.DeepEqual(v2, v3) {
		t.Fatalf("decoded %#v, after re-encoding %#v", v2, v3)
	}
	if !bytes.Equal(enc1, enc2) {
		t.Fatalf("encoding is not stable: %x then %x", enc1, enc2)
	}
}

// FuzzDecodeBody decodes body as the request and response bodies of message
// type typ; for a number the protocol does not use it picks a body type by
// the number, so every body type is fuzzed.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range fuzzSeedsFromVectors(f).bodies {
		f.Add(s.typ, s.data)
	}
	f.Add(uint16(TypePing), []byte{0xf6})
	f.Add(uint16(TypeKVList), []byte{0xa1, 0x01, 0xa0})
	f.Add(uint16(1000), []byte{0xa0})

	all := allBodyTypes()
	f.Fuzz(func(t *testing.T, typ uint16, body []byte) {
		var mks []func() any
		if bt, ok := messageBodies[Type(typ)]; ok {
			mks = []func() any{bt.req, bt.resp}
		} else {
			mks = []func() any{all[int(typ)%len(all)]}
		}
		frame := Frame{Type: Type(typ), ID: 1, Body: body}
		for _, mk := range mks {
			if mk == nil {
				continue
			}
			v := mk()
			err := frame.DecodeBody(v)
			if err != nil {
				if !errors.Is(err, ErrBadRequest) {
					t.Fatalf("DecodeBody error %v is not a bad request", err)
				}
				continue
			}
			if len(body) == 0 {
				if !reflect.DeepEqual(v, mk()) {
					t.Fatalf("an absent body decoded to %#v", v)
				}
				continue
			}
			checkStable(t, mk, v)
			checkRouteResults(t, v)
		}
	})
}

// checkRouteResults decodes the routes embedded in a body, as a client
// would, and checks that they too re-encode stably.
func checkRouteResults(t *testing.T, v any) {
	t.Helper()
	var results []RouteResult
	switch x := v.(type) {
	case *Routes:
		results = x.Results
	case *RouteEvent:
		results = []RouteResult{x.Result}
	}
	for _, r := range results {
		if len(r.Route) == 0 {
			continue
		}
		var route Route
		if err := Unmarshal(r.Route, &route); err == nil {
			checkStable(t, factory[Route](), &route)
		}
	}
}

// FuzzRoute decodes a Route, as a client does with a RouteResult's route,
// re-encodes it and decodes it again.
func FuzzRoute(f *testing.F) {
	for _, s := range fuzzSeedsFromVectors(f).routes {
		f.Add(s.data)
	}
	f.Add([]byte{0xa0})
	f.Add([]byte{0xa2, 0x01, 0x80, 0x02, 0x80})

	f.Fuzz(func(t *testing.T, data []byte) {
		var route Route
		if err := Unmarshal(data, &route); err != nil {
			return
		}
		checkStable(t, factory[Route](), &route)

		// A route in deterministic encoding is its own re-encoding, so its
		// version is the same on every node.
		enc, _ := Marshal(&route)
		var again Route
		if err := Unmarshal(enc, &again); err != nil {
			t.Fatal(err)
		}
		if enc2, _ := Marshal(&again); routeVersion(enc) != routeVersion(enc2) {
			t.Fatal("equal routes have different versions")
		}
	})
}
