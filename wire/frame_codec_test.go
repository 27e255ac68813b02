package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// frameCodecSeeds are frames at the edges of what decodeFrameFast takes:
// each is either read by hand or left to the reflection decoder, and both
// must agree on it.
var frameCodecSeeds = []string{
	"a0",                                 // no keys at all: type 0
	"a1 01 11",                           // type only
	"a2 02 05 01 11",                     // keys out of order
	"a3 03 a0 02 01 01 0a",               // body first
	"a2 01 1811 02 1a00000001",           // integers wider than they need be
	"a1 01 1b0000000000000011",           // type in eight bytes
	"a1 01 19ffff",                       // the largest type
	"a1 01 1a00010000",                   // a type over 16 bits
	"a1 01 20",                           // a negative type
	"a1 01 f6",                           // a null type
	"a1 01 f5",                           // a boolean type
	"a1 01 6131",                         // a text type
	"a1 02 3b00000000000000ff",           // a negative id
	"a1 1801 11",                         // key 1 in two bytes
	"a1 00 11",                           // key 0: unknown
	"a1 05 11",                           // key 5: unknown
	"a1 20 11",                           // key -1: unknown
	"a1 6131 11",                         // text key "1"
	"a2 01 11 01 11",                     // key 1 twice
	"a2 01 11 04 a1 01 01",               // an error
	"a3 01 11 02 01 03 f6",               // a null body
	"a3 01 11 02 01 03 f7",               // an undefined body
	"a3 01 11 02 01 03 f5",               // a boolean body
	"a3 01 11 02 01 03 f93c00",           // a float body
	"a3 01 11 02 01 03 00",               // an integer body
	"a3 01 11 02 01 03 40",               // an empty byte string body
	"a3 01 11 02 01 03 80",               // an empty array body
	"a3 01 11 02 01 03 6161",             // a text body
	"a3 01 11 02 01 03 62c328",           // a body of invalid UTF-8
	"a3 01 11 02 01 03 a1 01 62c328",     // invalid UTF-8 inside a body
	"a3 01 11 02 01 03 c1 00",            // a tagged body
	"a3 01 11 02 01 03 a1 01 c1 00",      // a tag inside a body
	"a3 01 11 02 01 03 bf ff",            // an indefinite body
	"a3 01 11 02 01 03 a1 01 5f ff",      // an indefinite string in a body
	"a3 01 11 02 01 03 a1 01 f820",       // simple value 32 in a body
	"a3 01 11 02 01 03 a1 01 f801",       // simple value 1 in two bytes: not well-formed
	"a3 01 11 02 01 03 a1 01 e0",         // simple value 0
	"a3 01 11 02 01 03 a1 01 f97e00",     // NaN in a body
	"a3 01 11 02 01 03 a1 01 fa7f800000", // infinity in a body
	"a3 01 11 02 01 03 a1 01 fb3ff0000000000000",
	"a3 01 11 02 01 03 a1 01 1c",                 // a reserved additional information
	"a3 01 11 02 01 03 a1 01 ff",                 // a break outside any indefinite item
	"a3 01 11 02 01 03 a2 01 00 01 00",           // a duplicate key inside the body: DecodeBody's to refuse
	"a3 01 11 02 01 03 a1 01 5a00000100 00",      // a byte string longer than the data
	"a3 01 11 02 01 03 9b0000000000000002 00 00", // an array length in eight bytes
	"a3 01 11 02 01 03 9b7fffffffffffffff 00",    // an absurd array length
	"a3 01 11 02 01 03 bb7fffffffffffffff 00",    // an absurd map length
	"a3 01 11 02 01 03 9a00100001 00",            // an array over MaxArrayElements
	"a3 01 11 02 01 03 a1",                       // a truncated body
	"a3 01 11 02 01 03 a0 00",                    // a byte after the frame
	"a3 01 11 02 01",                             // a pair missing
	"a4 01 11 02 01 03 a0 05 00",                 // four pairs
	"b803 01 11 02 01 03 a0",                     // the map's length in two bytes
	"bf 01 11 ff",                                // an indefinite frame map
	"80",                                         // an array, not a map
	"",                                           // nothing
}

// nested returns a frame whose body nests n containers deep.
func nested(n int) []byte {
	b := []byte{0xa3, 0x01, 0x11, 0x02, 0x01, 0x03}
	for range n - 1 {
		b = append(b, 0x81)
	}
	return append(b, 0x80)
}

func frameCodecSeedBytes(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, h := range frameCodecSeeds {
		b, err := hex.DecodeString(strings.ReplaceAll(h, " ", ""))
		if err != nil {
			tb.Fatalf("%q: %v", h, err)
		}
		out = append(out, b)
	}
	// The frame map counts as one level: a body of MaxNestingLevel-1
	// levels is the deepest frame the decoders accept.
	for n := MaxNestingLevel - 2; n <= MaxNestingLevel+1; n++ {
		out = append(out, nested(n))
	}
	for _, lv := range loadVectors(tb) {
		if isFrameVector(lv.name) {
			out = append(out, lv.cbor[FrameHeaderLen:])
		}
	}
	paths, err := filepath.Glob(filepath.Join(refusedDir, "*.json"))
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		var rf refusedFile
		if err := json.Unmarshal(raw, &rf); err != nil {
			tb.Fatal(err)
		}
		b, err := hex.DecodeString(rf.Hex)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// prefilled is a Frame as a caller might pass one it decoded into before:
// a field whose key is absent keeps its value on both paths.
func prefilled() Frame {
	return Frame{Type: 999, ID: 12345, Body: []byte{0xa1, 0x09, 0x09}, Error: &Error{Code: 7, Message: "old"}}
}

// checkFrameDecoders decodes b with the hand-written decoder and with the
// reflection decoder, into fresh frames and into prefilled ones, and
// fails unless they agree; it reports whether the hand-written one took b.
func checkFrameDecoders(t *testing.T, b []byte) bool {
	t.Helper()
	in := bytes.Clone(b)
	for _, start := range []func() Frame{func() Frame { return Frame{} }, prefilled} {
		fast, slow := start(), start()
		took := decodeFrameFast(b, &fast)
		slowErr := unmarshalFrame(b, &slow)
		if !took {
			if !reflect.DeepEqual(fast, start()) {
				t.Fatalf("%x: the hand-written decoder declined but changed the frame to %+v", b, fast)
			}
			var viaAPI Frame = start()
			apiErr := DecodeFrame(b, &viaAPI)
			if (apiErr == nil) != (slowErr == nil) || !reflect.DeepEqual(viaAPI, slow) {
				t.Fatalf("%x: DecodeFrame gave %+v, %v; the reflection decoder %+v, %v", b, viaAPI, apiErr, slow, slowErr)
			}
			continue
		}
		if slowErr != nil {
			t.Fatalf("%x: the hand-written decoder accepted %+v, the reflection decoder refuses: %v", b, fast, slowErr)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%x: hand-written %+v, reflection %+v", b, fast, slow)
		}
	}
	if !bytes.Equal(in, b) {
		t.Fatalf("decoding changed its input: %x, now %x", in, b)
	}
	var f Frame
	return decodeFrameFast(b, &f)
}

// TestFrameDecoders runs the comparison of FuzzFrameDecode over its seeds,
// and checks that the hand-written decoder takes every frame vector that
// carries no error: the common frames must not fall back.
func TestFrameDecoders(t *testing.T) {
	for _, b := range frameCodecSeedBytes(t) {
		checkFrameDecoders(t, b)
	}
	for _, lv := range loadVectors(t) {
		if !isFrameVector(lv.name) {
			continue
		}
		var f Frame
		if err := DecodeFrame(lv.cbor[FrameHeaderLen:], &f); err != nil {
			t.Fatalf("%s: %v", lv.name, err)
		}
		var fast Frame
		if took := decodeFrameFast(lv.cbor[FrameHeaderLen:], &fast); took != (f.Error == nil) {
			t.Errorf("%s: hand-written decoder took it: %v; it carries an error: %v", lv.name, took, f.Error != nil)
		}
	}
}

// TestDecodeFrameAllocations: a common frame decodes without allocating,
// its body a sub-slice of the input.
func TestDecodeFrameAllocations(t *testing.T) {
	for _, name := range []string{"frame-get-routes-request", "frame-get-routes-response-fresh", "frame-ping-request"} {
		data := vectorCBOR(t, name)
		var f Frame
		allocs := testing.AllocsPerRun(100, func() {
			f = Frame{}
			if err := DecodeFrame(data, &f); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per DecodeFrame, want 0", name, allocs)
		}
		if len(f.Body) > 0 && &f.Body[len(f.Body)-1] != &data[len(data)-1] {
			t.Errorf("%s: the body is not a sub-slice of the frame's bytes", name)
		}
	}
}

// FuzzFrameDecode compares the hand-written frame decoder with the
// reflection decoder: on every input both accept it with the same frame,
// or the hand-written one declines and DecodeFrame answers as the
// reflection decoder does.
func FuzzFrameDecode(f *testing.F) {
	for _, b := range frameCodecSeedBytes(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFrameDecoders(t, b)
	})
}
