package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// The reflective encoder's view of the messages that have a hand-written
// MarshalCBOR: the same fields and tags without the methods, so Marshal
// of these takes reflection and is the reference.
type (
	plainRegister  Register
	plainLeaseAck  LeaseAck
	plainHeartbeat Heartbeat
	plainRegAck    struct {
		Lease        plainLeaseAck `cbor:"1,keyasint"`
		MasterAddr   string        `cbor:"2,keyasint,omitempty"`
		MasterHAAddr string        `cbor:"3,keyasint,omitempty"`
	}
)

func reflectEncode(t testing.TB, v any) []byte {
	t.Helper()
	var p any
	switch v := v.(type) {
	case *Register:
		p = (*plainRegister)(v)
	case *LeaseAck:
		p = (*plainLeaseAck)(v)
	case *Heartbeat:
		p = (*plainHeartbeat)(v)
	case *RegisterAck:
		p = &plainRegAck{Lease: plainLeaseAck(v.Lease), MasterAddr: v.MasterAddr, MasterHAAddr: v.MasterHAAddr}
	default:
		t.Fatalf("no reference for %T", v)
	}
	b, err := Marshal(p)
	if err != nil {
		t.Fatalf("reflective Marshal of %T: %v", v, err)
	}
	return b
}

// sampleRegisters covers each field's shortest-integer, sign and length
// boundaries, absent and empty lists, and more topics than fit a one-byte
// array head.
func sampleRegisters() []Register {
	ints := []uint64{0, 1, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<63 - 1, 1 << 63, 1<<64 - 1}
	sints := []int64{0, 1, -1, 23, 24, -24, -25, 255, -256, -257, 1 << 40, -(1 << 40), math.MaxInt64, math.MinInt64}
	lens := []int{0, 1, 23, 24, 255, 256, 70000}
	rng := rand.New(rand.NewPCG(3, 4))
	str := func() string { return strings.Repeat("x", lens[rng.IntN(len(lens))]) }
	var out []Register
	for i := range 200 {
		r := Register{
			Cluster: str(), BrokerName: str(), BrokerID: sints[rng.IntN(len(sints))], Addr: str(),
			HAAddr: str(), Zone: str(), ActingMaster: rng.IntN(2) == 0,
			DataVersion: DataVersion{State: ints[rng.IntN(len(ints))], Timestamp: sints[rng.IntN(len(sints))],
				Counter: ints[rng.IntN(len(ints))]},
			HeartbeatTimeoutMs: ints[rng.IntN(len(ints))],
		}
		switch i % 4 {
		case 0: // nil topics
		case 1:
			r.Topics = []TopicConfig{}
		default:
			r.Topics = make([]TopicConfig, rng.IntN(30))
		}
		if i == 2 {
			r.Topics = make([]TopicConfig, 300)
		}
		for k := range r.Topics {
			r.Topics[k] = TopicConfig{Name: str(), ReadQueues: uint32(ints[rng.IntN(6)]), WriteQueues: uint32(ints[rng.IntN(9)]),
				Perm: uint8(ints[rng.IntN(5)]), SysFlag: uint32(ints[rng.IntN(9)])}
		}
		out = append(out, r)
	}
	out = append(out, Register{}, Register{Cluster: "c\xff", Topics: []TopicConfig{{Name: "t\xfe"}}}) // invalid UTF-8 is sent as it is
	return out
}

// TestRegisterCodecEncode: the hand-written encoders give the vectors'
// bytes and the reflective encoder's bytes.
func TestRegisterCodecEncode(t *testing.T) {
	check := func(name string, v any) {
		t.Helper()
		want := reflectEncode(t, v)
		got, err := Marshal(v) // takes MarshalCBOR
		if err != nil {
			t.Fatalf("%s: Marshal: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: MarshalCBOR\n%x\nreflection\n%x", name, got, want)
		}
		var appended []byte
		switch v := v.(type) {
		case *Register:
			appended = AppendRegister([]byte{0xff}, v)
		case *RegisterAck:
			appended = AppendRegisterAck([]byte{0xff}, v)
		case *LeaseAck:
			appended = AppendLeaseAck([]byte{0xff}, v)
		case *Heartbeat:
			appended = AppendHeartbeat([]byte{0xff}, v)
		}
		if appended[0] != 0xff || !bytes.Equal(appended[1:], want) {
			t.Fatalf("%s: Append does not append the same bytes", name)
		}
		if f, err := NewRequest(TypeRegister, 1, v); err != nil || !bytes.Equal(f.Body, want) {
			t.Fatalf("%s: NewRequest body %x, %v", name, f.Body, err)
		}
		byValue := reflect.ValueOf(v).Elem().Interface()
		if b, err := MarshalBody(byValue); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("%s: MarshalBody by value %x, %v", name, b, err)
		}
		// The frames encoded in one pass, without AppendFrame's check of
		// the body, are the frames AppendFrame makes of the same body.
		frame, err := AppendFrame([]byte{0xee}, &Frame{Type: TypeHeartbeat, ID: 300, Body: want})
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range []any{v, byValue} {
			req, err := AppendRequest([]byte{0xee}, TypeHeartbeat, 300, body)
			if err != nil || !bytes.Equal(req, frame) {
				t.Fatalf("%s: AppendRequest(%T)\n%x, %v\nAppendFrame\n%x", name, body, req, err, frame)
			}
			resp, err := AppendResponse([]byte{0xee}, TypeHeartbeat, 300, body)
			if err != nil || !bytes.Equal(resp, frame) {
				t.Fatalf("%s: AppendResponse(%T)\n%x, %v\nAppendFrame\n%x", name, body, resp, err, frame)
			}
		}
	}
	vectors := 0
	for _, lv := range loadVectors(t) {
		var v any
		switch lv.file.Type {
		case "Register":
			v = &Register{}
		case "RegisterAck":
			v = &RegisterAck{}
		case "LeaseAck":
			v = &LeaseAck{}
		case "Heartbeat":
			v = &Heartbeat{}
		default:
			continue
		}
		if err := Unmarshal(lv.cbor, v); err != nil {
			t.Fatal(err)
		}
		vectors++
		check(lv.name, v)
		if got, _ := Marshal(v); !bytes.Equal(got, lv.cbor) {
			t.Errorf("%s: MarshalCBOR\n%x\nvector\n%x", lv.name, got, lv.cbor)
		}
	}
	if vectors < 4 {
		t.Fatalf("only %d register, ack and heartbeat vectors", vectors)
	}
	for i, r := range sampleRegisters() {
		check(fmt.Sprintf("register %d", i), &r)
		if n, want := registerSizeHint(&r), len(AppendRegister(nil, &r)); n != want {
			t.Fatalf("register %d: size hint %d, encoding %d bytes", i, n, want)
		}
		h := Heartbeat{Cluster: r.Cluster, Addr: r.Addr, Epoch: r.DataVersion.Counter, DataVersion: r.DataVersion}
		check(fmt.Sprintf("heartbeat %d", i), &h)
		a := LeaseAck{Epoch: r.DataVersion.State, DeadlineMs: r.BrokerID, VersionChanged: r.ActingMaster,
			HeartbeatIntervalMs: r.HeartbeatTimeoutMs, ThresholdMs: r.DataVersion.Counter}
		check(fmt.Sprintf("lease ack %d", i), &a)
		ra := RegisterAck{Lease: a, MasterAddr: r.Addr, MasterHAAddr: r.HAAddr}
		check(fmt.Sprintf("register ack %d", i), &ra)
	}
	// A nil pointer is null, as reflection has it.
	for _, v := range []any{(*Register)(nil), (*Heartbeat)(nil), (*LeaseAck)(nil)} {
		f, err := NewRequest(TypeRegister, 1, v)
		if err != nil || !bytes.Equal(f.Body, []byte{0xf6}) {
			t.Errorf("NewRequest(%T nil) body %x, %v; want f6", v, f.Body, err)
		}
	}
	// As a field value and by value, as well as by pointer.
	check("zero ack", &RegisterAck{})
	if got, want := mustMarshal(t, RegisterAck{MasterAddr: "a"}), reflectEncode(t, &RegisterAck{MasterAddr: "a"}); !bytes.Equal(got, want) {
		t.Errorf("by value: %x, want %x", got, want)
	}
}

// registerInputs are register bodies for the decoder tests: the vectors,
// samples, odd shapes, and the truncations and one-byte mutations of the
// small ones.
func registerInputs(t testing.TB) [][]byte {
	var small [][]byte
	for _, lv := range loadVectors(t) {
		if lv.file.Type == "Register" || lv.file.Type == "Heartbeat" {
			small = append(small, lv.cbor)
		}
	}
	if len(small) < 3 {
		t.Fatal("no Register or Heartbeat vectors")
	}
	small = append(small,
		[]byte{0xa1, 0x01, 0x61, 0x61}, // one field
		[]byte{0xa0},                   // empty map
		[]byte{0xa2, 0x01, 0x61, 0x61, 0x01, 0x61, 0x62},                         // duplicate key
		[]byte{0xa2, 0x01, 0x61, 0x61, 0x18, 0x01, 0x61, 0x62},                   // duplicate key of two widths
		[]byte{0xa2, 0x02, 0x61, 0x61, 0x01, 0x61, 0x62},                         // keys out of order
		[]byte{0xa1, 0x0b, 0x01},                                                 // unknown key
		[]byte{0xa1, 0x18, 0x0a, 0x01},                                           // long-form key
		[]byte{0xa1, 0x03, 0x1b, 0x80, 0, 0, 0, 0, 0, 0, 0},                      // broker id overflows int64
		[]byte{0xa1, 0x03, 0x3b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // MinInt64
		[]byte{0xa1, 0x03, 0x3b, 0x80, 0, 0, 0, 0, 0, 0, 0},                      // below MinInt64
		[]byte{0xa1, 0x07, 0xf6},                                                 // null bool
		[]byte{0xa1, 0x07, 0xf8, 0x15},                                           // two-byte simple value
		[]byte{0xa1, 0x07, 0x01},                                                 // integer for a bool
		[]byte{0xa1, 0x09, 0xf6},                                                 // null topics
		[]byte{0xa1, 0x09, 0x9f, 0xff},                                           // indefinite array
		[]byte{0xa1, 0x09, 0x9a, 0xff, 0xff, 0xff, 0xff},                         // huge declared array
		[]byte{0xa1, 0x09, 0x81, 0xa1, 0x04, 0x19, 0x01, 0x00},                   // perm 256
		[]byte{0xa1, 0x09, 0x81, 0xa1, 0x02, 0x1b, 0, 0, 0, 1, 0, 0, 0, 0},       // read queues over uint32
		[]byte{0xa1, 0x09, 0x81, 0xa1, 0x02, 0x20},                               // negative queues
		[]byte{0xa1, 0x09, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x01, 0x61, 0x61},       // duplicate key in a topic
		[]byte{0xa1, 0x09, 0x81, 0xa1, 0x01, 0x62, 0xff, 0xfe},                   // invalid UTF-8
		[]byte{0xa1, 0x09, 0x81, 0xa1, 0x09, 0xa2, 0x01, 0x00, 0x01, 0x00},       // duplicate key in an unknown field
		[]byte{0xa1, 0x09, 0x81, 0xa0},                                           // empty topic
		[]byte{0xa1, 0x08, 0xa1, 0x02, 0x39, 0x01, 0x00},                         // negative timestamp
		[]byte{0xa1, 0x08, 0xa1, 0x01, 0x20},                                     // negative state
		[]byte{0xa1, 0x08, 0xa1, 0x04, 0x00},                                     // unknown data version key
		[]byte{0xa1, 0x01, 0xc1, 0x61, 0x61},                                     // tag
		[]byte{0xa1, 0x01, 0x61, 0x61, 0x00},                                     // trailing byte
		[]byte{0xa1, 0x01, 0x7f, 0x61, 0x61, 0xff},                               // indefinite text
		[]byte{0xa1, 0x01, 0x41, 0x61},                                           // byte string for text
		[]byte{0xa1, 0x0a, 0xfb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0},                   // float for an integer
		[]byte{0x81, 0x01},                                                       // not a map
	)
	var in [][]byte
	in = append(in, small...)
	for _, b := range small {
		for k := range b {
			in = append(in, b[:k])
			for _, x := range []byte{0x00, 0x01, 0x04, 0x09, 0x18, 0x1f, 0x20, 0x3b, 0x61, 0x7f, 0x80, 0xa2, 0xf5, 0xff} {
				m := bytes.Clone(b)
				m[k] = x
				in = append(in, m)
			}
		}
	}
	for _, r := range sampleRegisters() {
		in = append(in, mustMarshal(t, &r))
	}
	return in
}

// TestDecodeRegister: the fast register and heartbeat decoders give what
// the general decoder gives, value and error, on every input.
func TestDecodeRegister(t *testing.T) {
	fastReg, fastBeat := 0, 0
	for _, b := range registerInputs(t) {
		r, h := compareRegisterDecoders(t, b)
		fastReg += b2i(r)
		fastBeat += b2i(h)
	}
	if fastReg < 100 || fastBeat < 10 {
		t.Errorf("the fast paths ran %d and %d times", fastReg, fastBeat)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func compareRegisterDecoders(t testing.TB, b []byte) (fastRegister, fastHeartbeat bool) {
	t.Helper()
	f := &Frame{Type: TypeRegister, Body: b}
	var want, got Register
	wantErr := f.DecodeBody(&want)
	gotErr := f.DecodeRegister(&got)
	if !refusedTopicName(t, b, "DecodeRegister", gotErr, wantErr, want.Topics) {
		sameResult(t, b, "DecodeRegister", got, want, gotErr, wantErr)
	}
	var wantH, gotH Heartbeat
	wantErr = f.DecodeBody(&wantH)
	gotErr = f.DecodeHeartbeat(&gotH)
	sameResult(t, b, "DecodeHeartbeat", gotH, wantH, gotErr, wantErr)
	var r Register
	var h Heartbeat
	fastReg, _ := decodeRegisterFast(b, &r)
	return len(b) > 0 && fastReg, len(b) > 0 && decodeHeartbeatFast(b, &h)
}

// refusedTopicName reports whether gotErr is the refusal of a topic name
// the decoders give where the general decoder gives no error: then it
// checks that the general decoder's topics (its result when it gave no
// error) hold a name the node refuses (among the topics or the names
// removed), so the refusal only came earlier.
func refusedTopicName(t testing.TB, b []byte, name string, gotErr, wantErr error, want []TopicConfig, wantNames ...string) bool {
	t.Helper()
	var we *Error
	if !errors.As(gotErr, &we) || we.Code != CodeBadRequest || !strings.HasPrefix(we.Message, "invalid argument: invalid topic name") {
		return false
	}
	if wantErr != nil {
		return true // refused on both paths, code 1 either way
	}
	for _, tc := range want {
		if ValidTopicName(tc.Name) != nil {
			return true
		}
	}
	for _, n := range wantNames {
		if ValidTopicName(n) != nil {
			return true
		}
	}
	t.Fatalf("%x: %s refused %v, but every topic DecodeBody gives has a valid name", b, name, gotErr)
	return true
}

func sameResult(t testing.TB, b []byte, name string, got, want any, gotErr, wantErr error) {
	t.Helper()
	if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
		t.Fatalf("%x: %s error %v, DecodeBody error %v", b, name, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%x: %s %#v, DecodeBody %#v", b, name, got, want)
	}
}

func FuzzDecodeRegister(f *testing.F) {
	in := registerInputs(f)
	for _, b := range in[:40] {
		f.Add(b)
	}
	for _, b := range in[len(in)-5:] {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { compareRegisterDecoders(t, b) })
}

func benchRegister() *Register {
	r := &Register{Cluster: "BenchCluster", BrokerName: "bench-broker-0001", Addr: "10.1.0.1:10911", HAAddr: "10.1.0.1:10912",
		DataVersion: DataVersion{Counter: 12345}, HeartbeatTimeoutMs: 3600000}
	for i := range 100 {
		r.Topics = append(r.Topics, TopicConfig{Name: fmt.Sprintf("bench_topic_0001_%03d", i), ReadQueues: 8, WriteQueues: 8, Perm: 6})
	}
	return r
}

// BenchmarkDecodeRegister decodes the bench workload's 100-topic
// registration (about 3 KB), by reflection and by hand.
func BenchmarkDecodeRegister(b *testing.B) {
	f := &Frame{Type: TypeRegister, Body: mustMarshal(b, benchRegister())}
	b.Run("DecodeBody", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r Register
			if err := f.DecodeBody(&r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeRegister", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r Register
			if err := f.DecodeRegister(&r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncodeRegister encodes the same registration.
func BenchmarkEncodeRegister(b *testing.B) {
	r := benchRegister()
	b.Run("reflection", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Marshal((*plainRegister)(r)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendRegister", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 4096)
		for b.Loop() {
			buf = AppendRegister(buf[:0], r)
		}
	})
}

// updateTopicsInputs are update-topics bodies for the decoder tests: the
// vectors, random updates, odd shapes of the remove list, and the
// truncations and one-byte mutations of the small ones; the register
// inputs too, whose keys 1 to 6 overlap.
func updateTopicsInputs(t testing.TB) [][]byte {
	small := append(vectorBodies(t, "UpdateTopics"),
		[]byte{0xa1, 0x06, 0x80},                         // empty remove list
		[]byte{0xa1, 0x06, 0xf6},                         // null remove list
		[]byte{0xa1, 0x06, 0x81, 0xf6},                   // null name
		[]byte{0xa1, 0x06, 0x81, 0x01},                   // integer name
		[]byte{0xa1, 0x06, 0x81, 0x62, 0xff, 0xfe},       // invalid UTF-8
		[]byte{0xa1, 0x06, 0x82, 0x61, 0x61},             // one name short
		[]byte{0xa1, 0x06, 0x9a, 0xff, 0xff, 0xff, 0xff}, // huge declared array
		[]byte{0xa1, 0x06, 0x9f, 0x61, 0x61, 0xff},       // indefinite array
		[]byte{0xa1, 0x05, 0x80},                         // empty upsert list
		[]byte{0xa1, 0x07, 0x80},                         // unknown key
		[]byte{0xa1, 0x03, 0x20},                         // negative epoch
		[]byte{0xa2, 0x06, 0x80, 0x05, 0x80},             // keys out of order
		[]byte{0xa2, 0x06, 0x80, 0x06, 0x80},             // duplicate key
	)
	var in [][]byte
	in = append(in, small...)
	for _, b := range small {
		for k := range b {
			in = append(in, b[:k])
			for _, x := range []byte{0x00, 0x01, 0x05, 0x06, 0x18, 0x1f, 0x20, 0x3b, 0x61, 0x7f, 0x80, 0xa2, 0xf5, 0xff} {
				m := bytes.Clone(b)
				m[k] = x
				in = append(in, m)
			}
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, r := range sampleRegisters() {
		u := UpdateTopics{Cluster: r.Cluster, Addr: r.Addr, Epoch: r.HeartbeatTimeoutMs, DataVersion: r.DataVersion, Upsert: r.Topics}
		for range rng.IntN(4) {
			u.Remove = append(u.Remove, strings.Repeat("r", rng.IntN(300)))
		}
		in = append(in, mustMarshal(t, &u))
	}
	return append(in, registerInputs(t)...)
}

// TestDecodeUpdateTopics: the fast update-topics decoder gives what the
// general decoder gives, value and error, on every input.
func TestDecodeUpdateTopics(t *testing.T) {
	fast := 0
	for _, b := range updateTopicsInputs(t) {
		fast += b2i(compareUpdateTopicsDecoders(t, b))
	}
	if fast < 100 {
		t.Errorf("the fast path ran %d times", fast)
	}
}

func compareUpdateTopicsDecoders(t testing.TB, b []byte) (fastPath bool) {
	t.Helper()
	f := &Frame{Type: TypeUpdateTopics, Body: b}
	var want, got UpdateTopics
	wantErr := f.DecodeBody(&want)
	gotErr := f.DecodeUpdateTopics(&got)
	if !refusedTopicName(t, b, "DecodeUpdateTopics", gotErr, wantErr, want.Upsert, want.Remove...) {
		sameResult(t, b, "DecodeUpdateTopics", got, want, gotErr, wantErr)
	}
	var u UpdateTopics
	fast, _ := decodeUpdateTopicsFast(b, &u)
	return len(b) > 0 && fast
}

func FuzzDecodeUpdateTopics(f *testing.F) {
	in := updateTopicsInputs(f)
	for _, b := range in[:30] {
		f.Add(b)
	}
	for _, b := range in[len(in)-200 : len(in)-195] {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { compareUpdateTopicsDecoders(t, b) })
}

// BenchmarkDecodeUpdateTopics decodes an update of ten topics, one
// removed, by reflection and by hand.
func BenchmarkDecodeUpdateTopics(b *testing.B) {
	u := &UpdateTopics{Cluster: "BenchCluster", Addr: "10.1.0.1:10911", Epoch: 12345, DataVersion: DataVersion{Counter: 7},
		Upsert: benchRegister().Topics[:10], Remove: []string{"bench_topic_0001_099"}}
	f := &Frame{Type: TypeUpdateTopics, Body: mustMarshal(b, u)}
	for name, decode := range map[string]func(*UpdateTopics) error{
		"DecodeBody":         func(u *UpdateTopics) error { return f.DecodeBody(u) },
		"DecodeUpdateTopics": f.DecodeUpdateTopics,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var u UpdateTopics
				if err := decode(&u); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
