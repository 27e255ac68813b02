package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		tb.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// nestedArrays returns n nested one-element arrays around the integer 0:
// n container levels.
func nestedArrays(n int) string {
	return strings.Repeat("81", n) + "00"
}

// arrayHeader returns the header of a definite-length array (major type 4)
// or map (major type 5) of n elements, in its 4-byte argument form.
func containerHeader(major byte, n uint32) string {
	var b [5]byte
	b[0] = major<<5 | 26
	binary.BigEndian.PutUint32(b[1:], n)
	return hex.EncodeToString(b[:])
}

func TestDecodeLimits(t *testing.T) {
	// A list of 2^20 empty strings: the largest array allowed.
	maxList := containerHeader(4, MaxArrayElements) + strings.Repeat("60", MaxArrayElements)
	// A map of 2^20 pairs, the largest allowed: distinct integer keys, null
	// values.
	maxMap := make([]byte, 0, 5+6*MaxMapPairs)
	maxMap = append(maxMap, unhex(t, containerHeader(5, MaxMapPairs))...)
	for i := range uint32(MaxMapPairs) {
		maxMap = append(maxMap, 0x1a)
		maxMap = binary.BigEndian.AppendUint32(maxMap, i)
		maxMap = append(maxMap, 0xf6)
	}

	tests := []struct {
		name    string
		hex     string
		into    func() any
		wantErr string // substring of the error; "" means success
		want    any    // the decoded value, when set
	}{
		// Duplicate map keys.
		{"duplicate key", "a2 01 6161 01 6162", factory[KVValue](), "duplicate map key", nil},
		{"duplicate key among others", "a3 01 6161 02 6162 01 6163", factory[KVRequest](), "duplicate map key", nil},
		{"duplicate unknown key", "a3 01 6161 1863 01 1863 02", factory[KVValue](), "duplicate map key", nil},
		{"duplicate key in nested map", "a1 04 a2 00 6161 00 6162", factory[BrokerData](), "duplicate map key", nil},
		{"duplicate text key in map[string]string", "a1 01 a2 6161 6131 6161 6132", factory[KVList](), "duplicate map key", nil},

		// Indefinite lengths.
		{"indefinite map", "bf 01 6161 ff", factory[KVValue](), "indefinite-length map", nil},
		{"indefinite array", "a1 01 9f 6161 ff", factory[TopicList](), "indefinite-length array", nil},
		{"indefinite text string", "a1 01 7f 6161 ff", factory[KVValue](), "indefinite-length UTF-8 text string", nil},
		{"indefinite byte string in unknown field", "a2 01 6161 1863 5f 4101 ff", factory[KVValue](), "indefinite-length byte string", nil},

		// Tags.
		{"tag on a field", "a1 01 c1 1a5f5e1000", factory[LeaseAck](), "tag", nil},
		{"tag on a text field", "a1 01 c0 6161", factory[KVValue](), "tag", nil},
		{"tag in unknown field", "a2 01 6161 1863 c1 01", factory[KVValue](), "tag", nil},
		{"self-described CBOR tag", "d9d9f7 a1 01 6161", factory[KVValue](), "tag", nil},

		// Nesting: at most MaxNestingLevel arrays and maps, the outer map
		// included.
		{"nesting 16", "a2 01 6161 1863 " + nestedArrays(MaxNestingLevel-1), factory[KVValue](), "", &KVValue{Value: "a"}},
		{"nesting 17", "a2 01 6161 1863 " + nestedArrays(MaxNestingLevel), factory[KVValue](), "exceeded max nested level 16", nil},
		{"nesting 100", nestedArrays(100), factory[TopicList](), "exceeded max nested level 16", nil},

		// UTF-8.
		{"invalid UTF-8 in text field", "a1 01 62 c328", factory[KVValue](), "invalid UTF-8", nil},
		{"invalid UTF-8 in array element", "a1 01 82 6161 61ff", factory[TopicList](), "invalid UTF-8", nil},
		{"invalid UTF-8 in map key", "a1 01 a1 61ff 6161", factory[KVList](), "invalid UTF-8", nil},
		{"surrogate in text", "a1 01 63 eda080", factory[KVValue](), "invalid UTF-8", nil},
		{"valid multi-byte UTF-8", "a1 01 63 e282ac", factory[KVValue](), "", &KVValue{Value: "€"}},

		// Array and map sizes.
		{"array of 2^20 elements", "a1 01 " + maxList, factory[TopicList](), "", nil},
		{"array of 2^20+1 elements", "a1 01 " + containerHeader(4, MaxArrayElements+1), factory[TopicList](), "exceeded max number of elements", nil},
		{"map of 2^20 pairs in an unknown field", "a2 01 6161 1863 " + hex.EncodeToString(maxMap), factory[KVValue](), "", &KVValue{Value: "a"}},
		{"map of 2^20+1 pairs", "a1 01 " + containerHeader(5, MaxMapPairs+1), factory[KVList](), "exceeded max number of key-value pairs", nil},
		{"array claiming 2^32-1 elements", "a1 01 9affffffff", factory[TopicList](), "exceeded max number of elements", nil},

		// Forward compatibility: unknown keys are ignored, whatever they hold.
		{"unknown int key", "a2 01 6161 1863 01", factory[KVValue](), "", &KVValue{Value: "a"}},
		{"unknown negative key", "a2 01 6161 20 01", factory[KVValue](), "", &KVValue{Value: "a"}},
		{"unknown text key", "a2 01 6161 6178 01", factory[KVValue](), "", &KVValue{Value: "a"}},
		{"unknown key holding a map", "a2 1863 a2 01 02 03 8104 01 6161", factory[KVValue](), "", &KVValue{Value: "a"}},
		{"unknown key in nested struct", "a1 01 a3 01 07 02 1a000f4240 1864 f5", factory[RegisterAck](), "", &RegisterAck{Lease: LeaseAck{Epoch: 7, DeadlineMs: 1000000}}},
		{"unknown key 6 in LeaseAck", "a3 01 07 02 01 06 6178", factory[LeaseAck](), "", &LeaseAck{Epoch: 7, DeadlineMs: 1}},

		// Absent and null fields are zero values.
		{"empty map", "a0", factory[Register](), "", &Register{}},
		{"absent omitempty field", "a1 01 6161", factory[KVRequest](), "", &KVRequest{Namespace: "a"}},
		{"null field", "a1 01 f6", factory[TopicList](), "", &TopicList{}},
		{"empty array", "a1 01 80", factory[TopicList](), "", &TopicList{Topics: []string{}}},

		// Type mismatches and other malformed input.
		{"text for an integer", "a1 01 6131", factory[WatchAck](), "cannot unmarshal", nil},
		{"integer overflowing uint8", "a2 01 6161 02 190100", factory[RouteResult](), "overflows", nil},
		{"negative broker id key accepted", "a1 04 a1 20 6161", factory[BrokerData](), "", &BrokerData{Addrs: map[int64]string{-1: "a"}}},
		{"negative for unsigned", "a1 01 20", factory[LeaseAck](), "cannot unmarshal negative integer", nil},
		{"array for a struct", "80", factory[KVValue](), "cannot unmarshal array", nil},
		{"byte string for a text field", "a1 01 4161", factory[KVValue](), "cannot unmarshal byte string", nil},
		{"trailing bytes", "a1 01 6161 00", factory[KVValue](), "extraneous data", nil},
		{"truncated", "a2 01 6161 02", factory[KVRequest](), "unexpected EOF", nil},
		{"empty input", "", factory[KVValue](), "EOF", nil},
		{"reserved additional info", "a1 01 1c", factory[WatchAck](), "invalid additional information", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.into()
			err := Unmarshal(unhex(t, tt.hex), v)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Unmarshal: %v", err)
				}
				if tt.want != nil && !reflect.DeepEqual(v, tt.want) {
					t.Errorf("got %#v, want %#v", v, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Unmarshal accepted it: %#v", v)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

// TestDecodeLimitsInFrames checks that the limits hold for a frame as a
// whole, body included, and that a body is checked again when decoded.
func TestDecodeLimitsInFrames(t *testing.T) {
	tests := []struct {
		name      string
		frame     string // frame CBOR, without the length prefix
		frameErr  string // DecodeFrame error substring; "" means success
		body      func() any
		bodyError string // DecodeBody error substring
	}{
		{"tag in body", "a3 010a 0201 03 a1 01 c1 00", "tag", nil, ""},
		{"indefinite body", "a3 010a 0201 03 bf ff", "indefinite-length map", nil, ""},
		// The frame's own map is level 1, its body level 2.
		{"body nested to the limit", "a3 0111 0201 03 a1 1863 " + nestedArrays(MaxNestingLevel-2), "", factory[Pong](), ""},
		{"body nested over the limit", "a3 0111 0201 03 a1 1863 " + nestedArrays(MaxNestingLevel-1), "exceeded max nested level", nil, ""},
		{"duplicate key in body", "a3 01 1818 0201 03 a2 01 6161 01 6162", "", factory[KVValue](), "duplicate map key"},
		// §3.2: duplicates are refused in unknown fields and embedded items too.
		{"duplicate key inside an unknown body field", "a3 01 1818 0201 03 a2 01 6161 09 a2 0101 0102", "", factory[KVValue](), "duplicate map key"},
		{"duplicate key deep in an unknown body field", "a3 01 1818 0201 03 a1 09 81 a1 01 a2 6178 00 6178 01", "", factory[KVValue](), "duplicate map key"},
		{"duplicate integer key of two widths", "a3 01 1818 0201 03 a1 09 a2 01 00 1801 01", "", factory[KVValue](), "duplicate map key"},
		{"duplicate key in an embedded item", "a3 01 1822 0201 03 a2 01 65726f757465 03 a2 0101 0102", "", factory[PolicyTest](), "duplicate map key"},
		{"duplicate key inside an unknown frame field", "a3 0111 0201 09 a2 0101 0102", "duplicate map key", nil, ""},
		{"no duplicate: equal keys in sibling maps", "a3 01 1818 0201 03 a2 01 6161 09 82 a1 0101 a1 0101", "", factory[KVValue](), ""},
		{"invalid UTF-8 in body", "a3 01 1818 0201 03 a1 01 61ff", "", factory[KVValue](), "invalid UTF-8"},
		{"body as a byte string", "a3 01 1818 0201 03 43 a10160", "", factory[KVValue](), "cannot unmarshal byte string"},
		{"duplicate frame key", "a3 0111 0201 0102", "duplicate map key", nil, ""},
		{"invalid UTF-8 in error message", "a3 0111 0201 04 a2 0101 02 61ff", "invalid UTF-8", nil, ""},
		{"type over uint16", "a1 01 1a00010000", "overflows", nil, ""},
		{"unknown frame key", "a3 0111 0201 1863 00", "", nil, ""},
		{"frame not a map", "83 0111 02", "cannot unmarshal array", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f Frame
			err := DecodeFrame(unhex(t, tt.frame), &f)
			if tt.frameErr != "" {
				if err == nil {
					t.Fatalf("DecodeFrame accepted it: %+v", f)
				}
				if !strings.Contains(err.Error(), tt.frameErr) || !strings.HasPrefix(err.Error(), "malformed frame: ") {
					t.Errorf("error %q, want malformed frame: ...%s...", err, tt.frameErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeFrame: %v", err)
			}
			if tt.body == nil {
				return
			}
			err = f.DecodeBody(tt.body())
			switch {
			case tt.bodyError == "" && err != nil:
				t.Fatalf("DecodeBody: %v", err)
			case tt.bodyError != "" && err == nil:
				t.Fatal("DecodeBody accepted it")
			case tt.bodyError != "":
				if !errors.Is(err, ErrBadRequest) {
					t.Errorf("DecodeBody error %v is not a bad request", err)
				}
				if !strings.Contains(err.Error(), tt.bodyError) || !strings.Contains(err.Error(), f.Type.String()) {
					t.Errorf("error %q does not name the type and %q", err, tt.bodyError)
				}
			}
		})
	}
}

// strictReader serves the first n bytes of data and fails any read past
// them, to prove a reader stops at the frame header.
type strictReader struct {
	data []byte
	n    int
	off  int
}

var errReadPastHeader = errors.New("test: read past the frame header")

func (r *strictReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, errReadPastHeader
	}
	k := copy(p, r.data[r.off:r.n])
	r.off += k
	return k, nil
}

// oneByteReader returns at most one byte per Read.
type oneByteReader struct{ r io.Reader }

func (r oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return r.r.Read(p[:1])
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

func lengthPrefix(n uint32) []byte {
	return binary.BigEndian.AppendUint32(nil, n)
}

func TestReadFrame(t *testing.T) {
	ping := unhex(t, "00000005 a2 0111 0201") // ping, id 1
	pingFrame := Frame{Type: TypePing, ID: 1}
	errIO := errors.New("connection reset")

	tests := []struct {
		name    string
		r       io.Reader
		limit   int
		want    *Frame
		wantErr error  // errors.Is target
		errText string // substring
	}{
		{"one frame", bytes.NewReader(ping), DefaultMaxRequestLen, &pingFrame, nil, ""},
		{"one byte at a time", oneByteReader{bytes.NewReader(ping)}, DefaultMaxRequestLen, &pingFrame, nil, ""},
		{"exactly at the limit", bytes.NewReader(ping), 5, &pingFrame, nil, ""},
		{"clean EOF", bytes.NewReader(nil), DefaultMaxRequestLen, nil, io.EOF, ""},
		{"EOF inside the header", bytes.NewReader(ping[:3]), DefaultMaxRequestLen, nil, io.ErrUnexpectedEOF, ""},
		{"EOF after the header", bytes.NewReader(ping[:4]), DefaultMaxRequestLen, nil, io.ErrUnexpectedEOF, ""},
		{"truncated body", bytes.NewReader(ping[:7]), DefaultMaxRequestLen, nil, io.ErrUnexpectedEOF, ""},
		{"zero length", bytes.NewReader(lengthPrefix(0)), DefaultMaxRequestLen, nil, ErrEmptyFrame, ""},
		{"zero length, body not read", &strictReader{data: lengthPrefix(0), n: 4}, DefaultMaxRequestLen, nil, ErrEmptyFrame, ""},
		{"one over the limit", &strictReader{data: ping, n: 4}, 4, nil, nil, "frame of 5 bytes exceeds limit 4"},
		{"over a client's limit", &strictReader{data: append(lengthPrefix(DefaultMaxRequestLen+1), 0xa0), n: 4}, DefaultMaxRequestLen, nil, nil, "frame of 1048577 bytes exceeds limit 1048576"},
		{"over the hard cap", &strictReader{data: lengthPrefix(MaxFrameLen + 1), n: 4}, 1 << 30, nil, nil, fmt.Sprintf("frame of %d bytes exceeds limit %d", MaxFrameLen+1, MaxFrameLen)},
		{"length 2^32-1", &strictReader{data: lengthPrefix(1<<32 - 1), n: 4}, MaxFrameLen, nil, nil, "frame of 4294967295 bytes exceeds limit 67108864"},
		{"limit 0", &strictReader{data: ping, n: 4}, 0, nil, nil, "frame of 5 bytes exceeds limit 0"},
		{"reader error in header", failingReader{errIO}, DefaultMaxRequestLen, nil, errIO, ""},
		{"reader error in body", io.MultiReader(bytes.NewReader(ping[:6]), failingReader{errIO}), DefaultMaxRequestLen, nil, errIO, ""},
		{"malformed CBOR", bytes.NewReader(unhex(t, "00000002 a1 1c")), DefaultMaxRequestLen, nil, nil, "malformed frame"},
		{"bytes after the CBOR item", bytes.NewReader(unhex(t, "00000006 a2 0111 0201 00")), DefaultMaxRequestLen, nil, nil, "extraneous data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ReadFrame(tt.r, tt.limit)
			if tt.want != nil {
				if err != nil {
					t.Fatalf("ReadFrame: %v", err)
				}
				if !reflect.DeepEqual(f, *tt.want) {
					t.Errorf("got %+v, want %+v", f, *tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ReadFrame accepted it: %+v", f)
			}
			if errors.Is(err, errReadPastHeader) {
				t.Fatal("ReadFrame read past the header of a refused frame")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
			if tt.errText != "" && !strings.Contains(err.Error(), tt.errText) {
				t.Errorf("error %q does not contain %q", err, tt.errText)
			}
			if strings.Contains(tt.errText, "exceeds limit") {
				var tl *FrameTooLargeError
				if !errors.As(err, &tl) {
					t.Errorf("error %T is not a *FrameTooLargeError", err)
				}
			}
		})
	}
}

func TestReadFrameSequence(t *testing.T) {
	var stream []byte
	frames := []*Frame{
		{Type: TypeRegister, ID: 1, Body: mustMarshal(t, &Register{Cluster: "c", BrokerName: "b", Addr: "192.0.2.1:1", Topics: []TopicConfig{{Name: "T"}}})},
		{Type: TypeHeartbeat, ID: 2, Body: mustMarshal(t, &Heartbeat{Cluster: "c", Addr: "192.0.2.1:1", Epoch: 1})},
		{Type: TypeRouteEvent, Body: mustMarshal(t, &RouteEvent{Result: RouteResult{Topic: "T", Status: StatusNotFound}})},
		{Type: TypeHeartbeat, ID: 3, Error: &Error{Code: CodeStaleEpoch, Message: "epoch 1, current 2"}},
	}
	for _, f := range frames {
		var err error
		if stream, err = AppendFrame(stream, f); err != nil {
			t.Fatal(err)
		}
	}
	r := bytes.NewReader(stream)
	for i, want := range frames {
		got, err := ReadFrame(r, DefaultMaxBrokerFrameLen)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !reflect.DeepEqual(&got, want) {
			t.Errorf("frame %d: got %+v, want %+v", i, got, want)
		}
	}
	if _, err := ReadFrame(r, DefaultMaxBrokerFrameLen); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

// countingWriter records each Write.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

func TestFrameRoundTrip(t *testing.T) {
	for _, v := range vectorTable(t) {
		f, ok := v.value.(*Frame)
		if !ok {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			prefix := []byte("keep")
			buf, err := AppendFrame(prefix, f)
			if err != nil {
				t.Fatalf("AppendFrame: %v", err)
			}
			if !bytes.HasPrefix(buf, []byte("keep")) {
				t.Fatal("AppendFrame overwrote dst")
			}
			enc := buf[len("keep"):]
			if n := binary.BigEndian.Uint32(enc); int(n) != len(enc)-FrameHeaderLen {
				t.Errorf("length prefix %d, body %d bytes", n, len(enc)-FrameHeaderLen)
			}

			var w countingWriter
			if err := WriteFrame(&w, f); err != nil {
				t.Fatalf("WriteFrame: %v", err)
			}
			if w.writes != 1 {
				t.Errorf("WriteFrame made %d writes, want 1", w.writes)
			}
			if !bytes.Equal(w.Bytes(), enc) {
				t.Errorf("WriteFrame wrote %x, AppendFrame %x", w.Bytes(), enc)
			}

			got, err := ReadFrame(bytes.NewReader(enc), MaxFrameLen)
			if err != nil {
				t.Fatalf("ReadFrame: %v", err)
			}
			if !reflect.DeepEqual(&got, f) {
				t.Errorf("read back %+v, want %+v", got, f)
			}
			if again, _ := AppendFrame(nil, &got); !bytes.Equal(again, enc) {
				t.Errorf("re-encoding differs: %x vs %x", again, enc)
			}
		})
	}
}

func TestAppendFrameErrors(t *testing.T) {
	dst := []byte{1, 2, 3}
	// A body that is not one well-formed CBOR item cannot be sent.
	for _, body := range [][]byte{{0xff}, {0xa1, 0x01}, {0x01, 0x02}} {
		out, err := AppendFrame(dst, &Frame{Type: TypePing, ID: 1, Body: body})
		if err == nil {
			t.Errorf("body %x: AppendFrame accepted it", body)
		}
		if !bytes.Equal(out, dst) {
			t.Errorf("body %x: dst changed to %x", body, out)
		}
	}
	errIO := errors.New("stream closed")
	if err := WriteFrame(failingWriter{errIO}, &Frame{Type: TypePing}); !errors.Is(err, errIO) {
		t.Errorf("WriteFrame: %v, want %v", err, errIO)
	}
	if err := WriteFrame(io.Discard, &Frame{Type: TypePing, Body: []byte{0xff}}); err == nil {
		t.Error("WriteFrame accepted a malformed body")
	}
}

// TestAppendFrameChecksGivenBody: the one-pass encoders skip the
// well-formedness check only for bodies they encode themselves. A body a
// caller sets, on a NewRequest frame too, is still checked, and a
// malformed raw item handed to AppendRequest or AppendResponse is refused
// by the encoder.
func TestAppendFrameChecksGivenBody(t *testing.T) {
	f, err := NewRequest(TypeHeartbeat, 1, &Heartbeat{Cluster: "c", Addr: "a", Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AppendFrame(nil, f); err != nil {
		t.Fatalf("NewRequest's frame: %v", err)
	}
	for _, body := range [][]byte{f.Body[:len(f.Body)-1], append(f.Body[:len(f.Body):len(f.Body)], 0x01), {0xff}} {
		g := *f
		g.Body = body
		if out, err := AppendFrame([]byte{7}, &g); err == nil || !bytes.Equal(out, []byte{7}) {
			t.Errorf("body %x set on a NewRequest frame: AppendFrame %x, %v", body, out, err)
		}
		if err := WriteFrame(io.Discard, &g); err == nil {
			t.Errorf("body %x set on a NewRequest frame: WriteFrame accepted it", body)
		}
		for name, appendFn := range map[string]func([]byte, Type, uint64, any) ([]byte, error){
			"AppendRequest": AppendRequest, "AppendResponse": AppendResponse,
		} {
			if out, err := appendFn([]byte{7}, TypeHeartbeat, 1, cbor.RawMessage(body)); err == nil || !bytes.Equal(out, []byte{7}) {
				t.Errorf("raw body %x: %s %x, %v", body, name, out, err)
			}
		}
	}
}

func TestAppendFrameTooLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 64 MiB")
	}
	// A body of one byte string just over the hard cap.
	body := make([]byte, 0, MaxFrameLen+16)
	body = append(body, 0x5a)
	body = binary.BigEndian.AppendUint32(body, MaxFrameLen)
	body = body[:len(body)+MaxFrameLen]
	_, err := AppendFrame(nil, &Frame{Type: TypeKVPut, ID: 1, Body: body})
	var tl *FrameTooLargeError
	if !errors.As(err, &tl) || tl.Limit != MaxFrameLen || tl.Len <= MaxFrameLen {
		t.Fatalf("AppendFrame: %v, want a FrameTooLargeError", err)
	}
}

func TestNewRequestAndDecodeBody(t *testing.T) {
	f, err := NewRequest(TypePing, 9, nil)
	if err != nil || f.Type != TypePing || f.ID != 9 || f.Body != nil || f.Error != nil {
		t.Fatalf("NewRequest(ping) = %+v, %v", f, err)
	}
	var pong Pong
	if err := f.DecodeBody(&pong); err != nil || pong != (Pong{}) {
		t.Errorf("DecodeBody of an absent body: %+v, %v", pong, err)
	}

	hb := Heartbeat{Cluster: "c", Addr: "192.0.2.1:10911", Epoch: 3, DataVersion: DataVersion{Counter: 1}}
	f, err = NewRequest(TypeHeartbeat, 2, &hb)
	if err != nil {
		t.Fatal(err)
	}
	if want := mustMarshal(t, &hb); !bytes.Equal(f.Body, want) {
		t.Errorf("body %x, want %x", f.Body, want)
	}
	var got Heartbeat
	if err := f.DecodeBody(&got); err != nil || got != hb {
		t.Errorf("DecodeBody: %+v, %v", got, err)
	}

	if _, err := NewRequest(TypeKVPut, 1, make(chan int)); err == nil || !strings.Contains(err.Error(), "kv-put") {
		t.Errorf("NewRequest of an unencodable body: %v", err)
	}

	bad := &Frame{Type: TypeGetRoutes, ID: 1, Body: unhex(t, "a1 01 6161")}
	var gr GetRoutes
	err = bad.DecodeBody(&gr)
	var we *Error
	if !errors.As(err, &we) || we.Code != CodeBadRequest || !strings.Contains(we.Message, "malformed get-routes body") {
		t.Errorf("DecodeBody of a bad body: %v", err)
	}
}

func TestErrorIs(t *testing.T) {
	sentinels := map[Code]*Error{
		CodeBadRequest: ErrBadRequest, CodeFrameTooLarge: ErrFrameTooLarge, CodeUnknownType: ErrUnknownType,
		CodeNotAuthorized: ErrNotAuthorized, CodeNotFound: ErrNotFound, CodeWarmingUp: ErrWarmingUp,
		CodeLeaseNotFound: ErrLeaseNotFound, CodeStaleEpoch: ErrStaleEpoch, CodeStaleState: ErrStaleState,
		CodeConflict: ErrConflict, CodeNotGroupLeader: ErrNotGroupLeader, CodeOverloaded: ErrOverloaded,
		CodeInternal: ErrInternal, CodeUnavailable: ErrUnavailable, CodeTimeout: ErrTimeout,
	}
	if len(sentinels) != len(codeNames) {
		t.Fatalf("%d sentinels for %d codes", len(sentinels), len(codeNames))
	}
	for code, sentinel := range sentinels {
		if sentinel.Code != code {
			t.Errorf("sentinel of %s has code %d", code, sentinel.Code)
		}
		err := Errorf(code, "broker %s: %d", "x", 1)
		if err.Message != "broker x: 1" || err.Error() != "broker x: 1" {
			t.Errorf("Errorf message %q", err.Message)
		}
		wrapped := fmt.Errorf("call node-1: %w", err)
		for other, s := range sentinels {
			if got := errors.Is(wrapped, s); got != (other == code) {
				t.Errorf("errors.Is(%s error, %s sentinel) = %v", code, other, got)
			}
		}
		// An error decoded from the wire matches too.
		var decoded Error
		if err := Unmarshal(mustMarshal(t, err), &decoded); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(&decoded, sentinel) {
			t.Errorf("decoded %s error does not match its sentinel", code)
		}
		var as *Error
		if !errors.As(wrapped, &as) || as.Code != code {
			t.Errorf("errors.As: %v", as)
		}
	}
	if errors.Is(errors.New("not found"), ErrNotFound) {
		t.Error("a plain error matches ErrNotFound")
	}
	if got := (&Error{Code: CodeNotFound}).Error(); got != "not found" {
		t.Errorf("Error() without message = %q", got)
	}
	if got := Code(99).String(); got != "code 99" {
		t.Errorf("Code(99).String() = %q", got)
	}
}

// TestProtocolNumbers pins every number of the protocol: they may never
// change (PROTOCOL.md, Versioning).
func TestProtocolNumbers(t *testing.T) {
	types := map[Type]string{
		1: "register", 2: "update-topics", 3: "heartbeat", 4: "unregister",
		10: "get-routes", 11: "cluster-info", 12: "topics", 13: "broker-member-group",
		14: "watch", 15: "route-event", 16: "unwatch", 17: "ping", 18: "node-info",
		20: "delete-topic", 21: "wipe-write-perm", 22: "add-write-perm", 23: "kv-put",
		24: "kv-get", 25: "kv-delete", 26: "kv-list", 27: "leases",
		30: "policy-push", 31: "policy-list", 32: "policy-rollback", 33: "policy-remove", 34: "policy-test",
	}
	if len(types) != len(typeNames) {
		t.Errorf("%d types, want %d", len(typeNames), len(types))
	}
	for typ, name := range types {
		if typ.String() != name || !typ.Known() {
			t.Errorf("type %d is %q (known %v), want %q", typ, typ, typ.Known(), name)
		}
	}
	for _, typ := range []Type{0, 5, 9, 19, 28, 35, 65535} {
		if typ.Known() || typ.String() != "unknown" {
			t.Errorf("type %d is known as %q", typ, typ)
		}
	}
	codes := map[Code]string{
		1: "bad request", 2: "frame too large", 3: "unknown message type", 4: "not authorized",
		5: "not found", 6: "warming up", 7: "lease not found", 8: "stale epoch", 9: "stale state",
		10: "conflict", 11: "not group leader", 12: "overloaded", 13: "internal error",
		14: "unavailable", 15: "timeout",
	}
	if len(codes) != len(codeNames) {
		t.Errorf("%d codes, want %d", len(codeNames), len(codes))
	}
	for code, name := range codes {
		if code.String() != name {
			t.Errorf("code %d is %q, want %q", code, code, name)
		}
	}
	for s, name := range map[RouteStatus]string{0: "ok", 1: "not-modified", 2: "not-found", 3: "warming-up", 4: "policy-failed", 5: "unknown"} {
		if s.String() != name {
			t.Errorf("status %d is %q, want %q", s, s, name)
		}
	}
	if ALPN != "edgereg/1" || FrameHeaderLen != 4 || MaxFrameLen != 64<<20 ||
		DefaultMaxRequestLen != 1<<20 || DefaultMaxBrokerFrameLen != 16<<20 ||
		MaxNestingLevel != 16 || MaxArrayElements != 1<<20 || MaxMapPairs != 1<<20 {
		t.Error("a protocol constant changed")
	}
	if PermPriority != 8 || PermRead != 4 || PermWrite != 2 || PermInherit != 1 ||
		SysFlagUnit != 1 || SysFlagUnitSub != 2 || MasterID != 0 {
		t.Error("a RocketMQ constant changed")
	}
}

// TestProtocolDocument checks that PROTOCOL.md lists every message type and
// error code with its number.
func TestProtocolDocument(t *testing.T) {
	doc, err := os.ReadFile("PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	for typ := range typeNames {
		if row := fmt.Sprintf("| %d | `%s` |", typ, typ); !bytes.Contains(doc, []byte(row)) {
			t.Errorf("PROTOCOL.md has no row %q", row)
		}
	}
	for code := range codeNames {
		if row := fmt.Sprintf("| %d | `%s` |", code, code); !bytes.Contains(doc, []byte(row)) {
			t.Errorf("PROTOCOL.md has no row %q", row)
		}
	}
}

// TestDeterministicEncoding checks core deterministic encoding: shortest
// integer forms and map keys sorted bytewise by their encoding.
func TestDeterministicEncoding(t *testing.T) {
	tests := []struct {
		v    any
		want string
	}{
		{&WatchAck{Watching: 23}, "a1 01 17"},
		{&WatchAck{Watching: 24}, "a1 01 1818"},
		{&WatchAck{Watching: 256}, "a1 01 190100"},
		{&WatchAck{Watching: 65536}, "a1 01 1a00010000"},
		{&WatchAck{Watching: -1}, "a1 01 20"},
		{&LeaseAck{Epoch: 1 << 32, DeadlineMs: -1000}, "a2 01 1b0000000100000000 02 3903e7"},
		// Map keys by encoded bytes: 0x00 < 0x01 < 0x17 < 0x1818 < 0x20 (-1).
		{&BrokerData{Addrs: map[int64]string{-1: "e", 24: "d", 23: "c", 1: "b", 0: "a"}},
			"a3 01 60 02 60 04 a5 00 6161 01 6162 17 6163 1818 6164 20 6165"},
		// Text keys: shorter encodings first, then bytewise.
		{&KVList{Entries: map[string]string{"bb": "1", "a": "2", "c": "3", "": "4"}},
			"a1 01 a4 60 6134 6161 6132 6163 6133 626262 6131"},
		// nil slices and maps encode as empty containers, never as null.
		{&TopicList{}, "a1 01 80"},
		{&KVList{}, "a1 01 a0"},
	}
	for _, tt := range tests {
		if got := hex.EncodeToString(mustMarshal(t, tt.v)); got != strings.ReplaceAll(tt.want, " ", "") {
			t.Errorf("%T %+v encodes to %s, want %s", tt.v, tt.v, got, tt.want)
		}
	}
}

// TestAppendFrameMatchesEncoder: the hand-written frame encoding gives the
// deterministic encoder's bytes for every shape of frame.
func TestAppendFrameMatchesEncoder(t *testing.T) {
	bodies := [][]byte{nil, {0xa0}, {0xa1, 0x01, 0x63, 'a', 'b', 'c'}}
	types := []Type{1, 23, 24, 255, 256, 65535}
	ids := []uint64{0, 1, 23, 24, 255, 256, 65535, 65536, 1 << 32, 1<<64 - 1}
	for _, body := range bodies {
		for _, typ := range types {
			for _, id := range ids {
				f := &Frame{Type: typ, ID: id, Body: body}
				got, err := AppendFrame(nil, f)
				if err != nil {
					t.Fatal(err)
				}
				want, err := encMode.Marshal(f)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got[FrameHeaderLen:], want) {
					t.Fatalf("frame %+v: hand-encoded %x, encoder %x", f, got[FrameHeaderLen:], want)
				}
			}
		}
	}
}
