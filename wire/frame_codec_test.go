package wire

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"testing"
)

// generalDecodeFrame is DecodeFrame without its fast path.
func generalDecodeFrame(b []byte) (Frame, error) {
	var f Frame
	if err := unmarshalFrame(b, &f); err != nil {
		return f, fmt.Errorf("malformed frame: %w", err)
	}
	return f, nil
}

// frameInputs are frames without their length prefix: every frame and
// refused vector, register bodies in a frame, odd shapes, and the
// truncations and one-byte mutations of the small ones.
func frameInputs(t testing.TB) [][]byte {
	var small [][]byte
	for _, lv := range loadVectors(t) {
		if isFrameVector(lv.name) {
			small = append(small, lv.cbor[FrameHeaderLen:])
		}
	}
	for _, rv := range refusedTable() {
		b, err := hex.DecodeString(rv.file.Hex)
		if err != nil {
			t.Fatal(err)
		}
		small = append(small, b)
	}
	if len(small) < 20 {
		t.Fatal("too few frame vectors")
	}
	small = append(small,
		[]byte{0xa1, 0x01, 0x01}, // type only
		[]byte{0xa0},             // empty map
		[]byte{0xa2, 0x01, 0x19, 0xff, 0xff, 0x02, 0x00},             // largest type, id 0
		[]byte{0xa1, 0x01, 0x1a, 0x00, 0x01, 0x00, 0x00},             // type over uint16
		[]byte{0xa2, 0x01, 0x01, 0x03, 0xf6},                         // null body
		[]byte{0xa2, 0x01, 0x01, 0x03, 0xf7},                         // undefined body
		[]byte{0xa2, 0x01, 0x01, 0x03, 0xe0},                         // simple value body
		[]byte{0xa2, 0x01, 0x01, 0x03, 0xf8, 0x20},                   // two-byte simple value
		[]byte{0xa2, 0x01, 0x01, 0x03, 0xf9, 0x7e, 0x00},             // half-precision NaN
		[]byte{0xa2, 0x01, 0x01, 0x03, 0x40},                         // empty byte string
		[]byte{0xa2, 0x01, 0x01, 0x03, 0x62, 0xc3, 0x28},             // invalid UTF-8
		[]byte{0xa2, 0x01, 0x01, 0x03, 0xa2, 0x01, 0x00, 0x01, 0x00}, // duplicate key in the body: DecodeBody's
		[]byte{0xa2, 0x01, 0x01, 0x03, 0x9f, 0xff},                   // indefinite array
		[]byte{0xa2, 0x01, 0x01, 0x03, 0xc0, 0x00},                   // tag
		[]byte{0xa2, 0x01, 0x01, 0x03, 0x81},                         // truncated body
		[]byte{0xa2, 0x01, 0x01, 0x03, 0x01, 0x00},                   // trailing byte
		[]byte{0xa2, 0x01, 0x01, 0x01, 0x01},                         // duplicate frame key
		[]byte{0xa2, 0x02, 0x01, 0x01, 0x01},                         // keys out of order
		[]byte{0xa2, 0x01, 0x01, 0x04, 0xa1, 0x01, 0x01},             // an error
		[]byte{0xa2, 0x01, 0x01, 0x05, 0x00},                         // unknown key
		[]byte{0xa2, 0x18, 0x01, 0x01, 0x03, 0x00},                   // long-form key
		[]byte{0xa2, 0x01, 0x01, 0x03, 0x9a, 0xff, 0xff, 0xff, 0xff}, // huge declared array
		[]byte{0x81, 0x01},                                           // not a map
	)
	deep := []byte{0xa2, 0x01, 0x01, 0x03}
	for range 20 {
		deep = append(deep, 0x81)
	}
	small = append(small, append(deep, 0x00))
	for n := 10; n <= 16; n++ {
		d := append([]byte{0xa2, 0x01, 0x01, 0x03}, bytes.Repeat([]byte{0x81}, n)...)
		small = append(small, append(d, 0x00))
	}
	var in [][]byte
	in = append(in, small...)
	for _, b := range small {
		for k := range b {
			in = append(in, b[:k])
			for _, x := range []byte{0x00, 0x01, 0x03, 0x04, 0x18, 0x1f, 0x3b, 0x5f, 0x61, 0x7f, 0x9f, 0xa3, 0xbf, 0xc1, 0xf5, 0xf8, 0xff} {
				m := bytes.Clone(b)
				m[k] = x
				in = append(in, m)
			}
		}
	}
	for _, body := range registerInputs(t) {
		in = append(in, append([]byte{0xa3, 0x01, 0x01, 0x02, 0x07, 0x03}, body...))
	}
	return in
}

func TestDecodeFrameFast(t *testing.T) {
	fast := 0
	for _, b := range frameInputs(t) {
		if compareFrameDecoders(t, b) {
			fast++
		}
	}
	if fast < 1000 {
		t.Errorf("the fast path ran %d times", fast)
	}
}

func compareFrameDecoders(t testing.TB, b []byte) (fastPath bool) {
	t.Helper()
	want, wantErr := generalDecodeFrame(b)
	var got Frame
	gotErr := DecodeFrame(b, &got)
	sameResult(t, b, "DecodeFrame", got, want, gotErr, wantErr)
	var f Frame
	return decodeFrameFast(b, &f)
}

func FuzzDecodeFrameFast(f *testing.F) {
	in := frameInputs(f)
	for _, b := range in[:80] {
		f.Add(b)
	}
	for _, b := range in[len(in)-5:] {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { compareFrameDecoders(t, b) })
}

// BenchmarkDecodeFrame decodes a frame holding the bench workload's
// 100-topic registration.
func BenchmarkDecodeFrame(b *testing.B) {
	req, err := NewRequest(TypeRegister, 7, benchRegister())
	if err != nil {
		b.Fatal(err)
	}
	buf, _ := AppendFrame(nil, req)
	buf = buf[FrameHeaderLen:]
	b.Run("general", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := generalDecodeFrame(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeFrame", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var f Frame
			if err := DecodeFrame(buf, &f); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestDecodeFrameFastKeepsBody(t *testing.T) {
	// The body is a copy: the caller may reuse the frame's bytes.
	b := []byte{0xa2, 0x01, 0x01, 0x03, 0x41, 0x55}
	var f Frame
	if err := DecodeFrame(b, &f); err != nil {
		t.Fatal(err)
	}
	b[5] = 0
	if !bytes.Equal(f.Body, []byte{0x41, 0x55}) {
		t.Errorf("body %x changed with the input", f.Body)
	}
}
