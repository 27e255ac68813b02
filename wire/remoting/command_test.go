package remoting

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// failAfter returns its bytes, then fails the test if read further.
type failAfter struct {
	t *testing.T
	b []byte
}

func (f *failAfter) Read(p []byte) (int, error) {
	if len(f.b) == 0 {
		f.t.Fatal("read past the length prefix of a frame over the cap")
	}
	n := copy(p, f.b)
	f.b = f.b[n:]
	return n, nil
}

func TestReadCommandCapBeforeBody(t *testing.T) {
	for _, declared := range []uint32{DefaultMaxFrame - 3, 1 << 31, 0xFFFFFFFF} {
		var prefix [4]byte
		binary.BigEndian.PutUint32(prefix[:], declared)
		_, err := ReadCommand(&failAfter{t: t, b: prefix[:]}, 0)
		if !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("declared %d: %v, want ErrFrameTooLarge", declared, err)
		}
	}
	// Exactly at the cap (length + 4 == cap) is allowed: Netty counts the
	// prefix in its 16 MiB.
	frame, _ := NewRequest(GetRouteInfoByTopic, 1, nil, bytes.Repeat([]byte{'x'}, 1000)).Encode()
	if _, err := ReadCommand(bytes.NewReader(frame), len(frame)); err != nil {
		t.Fatalf("frame of exactly the cap: %v", err)
	}
	if _, err := ReadCommand(bytes.NewReader(frame), len(frame)-1); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("frame one over the cap: %v", err)
	}
}

// TestReadCommandMemoryFollowsBytes: a peer that declares 16 MiB and sends
// 100 bytes makes the reader hold about 100 bytes, not 16 MiB.
func TestReadCommandMemoryFollowsBytes(t *testing.T) {
	var frame []byte
	frame = binary.BigEndian.AppendUint32(frame, DefaultMaxFrame-4)
	frame = binary.BigEndian.AppendUint32(frame, 20)
	frame = append(frame, bytes.Repeat([]byte{'x'}, 100)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 10 {
		if _, err := ReadCommand(bytes.NewReader(frame), 0); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("truncated frame: %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("10 truncated 16 MiB frames allocated %d bytes", grew)
	}
}

func TestReadCommandErrors(t *testing.T) {
	good, _ := NewRequest(GetRouteInfoByTopic, 1, map[string]string{"topic": "t"}, nil).Encode()
	if _, err := ReadCommand(bytes.NewReader(nil), 0); err != io.EOF {
		t.Fatalf("empty stream: %v, want io.EOF", err)
	}
	for name, frame := range map[string][]byte{
		"length below 4":        {0, 0, 0, 3, 0, 0, 0},
		"header past the frame": {0, 0, 0, 6, 0, 0, 0, 9, '{', '}'},
		"unknown serialize":     {0, 0, 0, 6, 2, 0, 0, 2, '{', '}'},
		"not JSON":              {0, 0, 0, 6, 0, 0, 0, 2, '{', '{'},
		"no code":               {0, 0, 0, 6, 0, 0, 0, 2, '{', '}'},
		"code over int16":       append([]byte{0, 0, 0, 18, 0, 0, 0, 14}, `{"code":40000}`...),
		"ext value an object":   append([]byte{0, 0, 0, 35, 0, 0, 0, 31}, `{"code":1,"extFields":{"a":{}}}`...),
	} {
		if _, err := ReadCommand(bytes.NewReader(frame), 0); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := ReadCommand(bytes.NewReader(good[:len(good)-2]), 0); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut frame: %v", err)
	}
}

func TestBinaryHeaderRoundTrip(t *testing.T) {
	c := &Command{Code: GetRouteInfoByTopic, Language: "GO", Version: V4_5_2, Opaque: -5, Flag: FlagOneway,
		Remark: "héllo", ExtFields: map[string]string{"topic": "TopicTest", "b": ""}, Body: []byte("body"),
		SerializeType: SerializeRocketMQ}
	frame, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// The header's fixed part as RocketMQSerializable writes it.
	wantHead := []byte{0, 105, 9, 1, 61, 0xFF, 0xFF, 0xFF, 0xFB, 0, 0, 0, 2, 0, 0, 0, 6}
	if !bytes.Equal(frame[8:8+len(wantHead)], wantHead) {
		t.Fatalf("binary header starts % x, want % x", frame[8:8+len(wantHead)], wantHead)
	}
	got, err := DecodeFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip\n got %+v\nwant %+v", got, c)
	}
	// Every truncation and every overlong inner length is an error, not a panic.
	for i := 8; i < len(frame)-len(c.Body); i++ {
		cut := append([]byte(nil), frame[:i]...)
		binary.BigEndian.PutUint32(cut, uint32(len(cut)-4))
		binary.BigEndian.PutUint32(cut[4:], uint32(SerializeRocketMQ)<<24|uint32(len(cut)-8))
		if _, err := DecodeFrame(cut); err == nil {
			t.Fatalf("header cut at %d decodes", i)
		}
	}
}

func TestJSONHeaderReading(t *testing.T) {
	// Whitespace, any field order, null remark, unknown fields: all fine.
	h := []byte(` { "opaque" : 3, "remark" : null, "code" : 105, "extFields":{"topic":"a"}, "x":[1], "flag":0, "language":"PYTHON" } `)
	frame := binary.BigEndian.AppendUint32(nil, uint32(4+len(h)))
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(h)))
	frame = append(frame, h...)
	c, err := DecodeFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if c.Code != 105 || c.Opaque != 3 || c.Remark != "" || c.Ext("topic") != "a" || c.Language != "PYTHON" {
		t.Fatalf("%+v", c)
	}
}

func TestJSONEscaping(t *testing.T) {
	c := NewResponse(&Command{}, SystemError, "a\"b\\c\nd\te\x01f/g é")
	frame, _ := c.Encode()
	if !bytes.Contains(frame, []byte(`"remark":"a\"b\\c\nd\te\u0001f/g é"`)) {
		t.Fatalf("remark written as %s", frame)
	}
	r := &TopicRouteData{BrokerDatas: []BrokerData{{BrokerName: "b/é😀", BrokerAddrs: map[int64]string{}}}}
	if got := string(r.Encode(Standard)); !strings.Contains(got, `"brokerName":"b\/\u00E9\uD83D\uDE00"`) {
		t.Fatalf("standard dialect wrote %s", got)
	}
	if got := string(r.Encode(Legacy)); !strings.Contains(got, `"brokerName":"b/é😀"`) || !strings.Contains(got, `"brokerAddrs":{}`) {
		t.Fatalf("legacy dialect wrote %s", got)
	}
	// Both decode back.
	for _, d := range []Dialect{Legacy, Standard} {
		back, err := DecodeTopicRouteData(r.Encode(d))
		if err != nil || back.BrokerDatas[0].BrokerName != "b/é😀" {
			t.Fatalf("dialect %d: %+v %v", d, back, err)
		}
	}
}

func TestQuoteBareKeys(t *testing.T) {
	for in, want := range map[string]string{
		`{0:"a",1:"b"}`:              `{"0":"a","1":"b"}`,
		`{"0":"a"}`:                  `{"0":"a"}`,
		`[1,2,{3:[4,5]}]`:            `[1,2,{"3":[4,5]}]`,
		`{"s":"{0:\"x\",1:2}",-1:3}`: `{"s":"{0:\"x\",1:2}","-1":3}`,
		`{ 0 : "a" , 12:"b"}`:        `{ "0" : "a" , "12":"b"}`,
	} {
		if got := string(QuoteBareKeys([]byte(in))); got != want {
			t.Errorf("QuoteBareKeys(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestCompressedRegisterLimits(t *testing.T) {
	// A small stream that inflates past the cap is refused.
	var bomb bytes.Buffer
	w := zlib.NewWriter(&bomb)
	w.Write(binary.BigEndian.AppendUint32(nil, 8<<20))
	w.Write(make([]byte, 8<<20))
	w.Close()
	if _, err := DecodeRegisterBrokerBody(bomb.Bytes(), true, 1<<20); !errors.Is(err, ErrMalformed) {
		t.Fatalf("zlib bomb: %v", err)
	}
	// A declared topic count far beyond what follows is an error, not an
	// allocation.
	var lie bytes.Buffer
	w = zlib.NewWriter(&lie)
	dv := DataVersion{Counter: 1}.AppendJSON(nil)
	w.Write(binary.BigEndian.AppendUint32(nil, uint32(len(dv))))
	w.Write(dv)
	w.Write(binary.BigEndian.AppendUint32(nil, 1<<30))
	w.Write(binary.BigEndian.AppendUint32(nil, 1<<30))
	w.Close()
	if _, err := DecodeRegisterBrokerBody(lie.Bytes(), true, 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("lying counts: %v", err)
	}
	for name, body := range map[string][]byte{
		"not zlib":   []byte("{}"),
		"empty":      nil,
		"no wrapper": []byte(`{"filterServerList":[]}`),
		"bad json":   []byte(`{"topicConfigSerializeWrapper":`),
		"bad queues": []byte(`{"topicConfigSerializeWrapper":{"topicConfigTable":{"a":{"readQueueNums":"x"}}}}`),
	} {
		compressed := name == "not zlib"
		if _, err := DecodeRegisterBrokerBody(body, compressed, 0); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestTopicConfigDefaults(t *testing.T) {
	b, err := DecodeRegisterBrokerBody([]byte(`{"topicConfigSerializeWrapper":{"topicConfigTable":{"k":{}}}}`), false, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := TopicConfig{TopicName: "k", ReadQueueNums: 16, WriteQueueNums: 16, Perm: 6, TopicFilterType: "SINGLE_TAG"}
	if got := b.TopicConfigTable["k"]; !reflect.DeepEqual(got, want) {
		t.Fatalf("%+v", got)
	}
}

func TestHeaderParsing(t *testing.T) {
	if _, err := ParseRegisterBrokerHeader(map[string]string{"brokerName": "b", "brokerAddr": "a:1", "clusterName": "c"}); err == nil ||
		!strings.Contains(err.Error(), "brokerId") {
		t.Fatalf("missing brokerId: %v", err)
	}
	if _, err := ParseBrokerHeader(map[string]string{"brokerName": "b", "brokerAddr": "a:1", "clusterName": "c", "brokerId": "x"}); err == nil {
		t.Fatal("brokerId x accepted")
	}
	h := RegisterBrokerHeader{BrokerName: "b", BrokerAddr: "a:1", ClusterName: "c", BrokerID: 1, Compressed: true,
		BodyCRC32: 7, EnableActingMaster: true, HeartbeatTimeout: 10e9, ZoneName: "z"}
	back, err := ParseRegisterBrokerHeader(h.Ext())
	if err != nil || back != h {
		t.Fatalf("round trip %+v %v", back, err)
	}
}

// TestRegisterBody49 reads the 4.9 shapes: no stateVersion, no attributes,
// and a compressed body that ends after the filter server list.
func TestRegisterBody49(t *testing.T) {
	js := `{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"timestamp":1735689600000},` +
		`"topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":1,"writeQueueNums":4}}}}`
	b, err := DecodeRegisterBrokerBody([]byte(js), false, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := TopicConfig{TopicName: "T", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6, TopicFilterType: "SINGLE_TAG", TopicSysFlag: 1}
	if b.DataVersion != (DataVersion{Counter: 3, Timestamp: 1735689600000}) || !reflect.DeepEqual(b.TopicConfigTable["T"], want) {
		t.Fatalf("4.9 JSON body: %+v", b)
	}
	var raw bytes.Buffer
	part := func(p string) {
		raw.Write(binary.BigEndian.AppendUint32(nil, uint32(len(p))))
		raw.WriteString(p)
	}
	part(`{"counter":3,"timestamp":1735689600000}`)
	raw.Write(binary.BigEndian.AppendUint32(nil, 1))
	part("T 4 4 6 SINGLE_TAG")
	part("[]")
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	w.Write(raw.Bytes())
	w.Close()
	b, err = DecodeRegisterBrokerBody(z.Bytes(), true, 0)
	if err != nil {
		t.Fatal(err)
	}
	want.TopicSysFlag = 0 // the compressed line carries no system flag
	if !reflect.DeepEqual(b.TopicConfigTable["T"], want) {
		t.Fatalf("4.9 compressed body: %+v", b.TopicConfigTable)
	}
}

func TestRouteDialect(t *testing.T) {
	for _, c := range []struct {
		version int16
		accept  string
		want    Dialect
	}{
		{V4_5_2, "", Legacy}, {V4_9_4 - 1, "false", Legacy}, {V4_9_4, "", Standard}, {V5_3_3, "", Standard},
		{V4_5_2, "true", Standard}, {V4_5_2, "TRUE", Standard}, {V4_5_2, "yes", Legacy},
	} {
		req := &Command{Version: c.version, ExtFields: map[string]string{"acceptStandardJsonOnly": c.accept}}
		if got := RouteDialect(req); got != c.want {
			t.Errorf("version %d, acceptStandardJsonOnly %q: dialect %d, want %d", c.version, c.accept, got, c.want)
		}
	}
}

// TestJSONHeaderExtFieldsAsJavaReadsThem: a NameServer reads extFields into
// a HashMap<String,String> with fastjson, which takes a number or a boolean
// as its text and a null as no value (""). A peer that writes `"queueId":0`
// gets an answer from a Java NameServer, so it must from edgereg too, not
// a closed connection; objects and arrays are still malformed.
func TestJSONHeaderExtFieldsAsJavaReadsThem(t *testing.T) {
	frameOf := func(h string) []byte {
		frame := binary.BigEndian.AppendUint32(nil, uint32(4+len(h)))
		frame = binary.BigEndian.AppendUint32(frame, uint32(len(h)))
		return append(frame, h...)
	}
	c, err := DecodeFrame(frameOf(`{"code":105,"opaque":1,"flag":0,"extFields":{"topic":"t","queueId":0,"order":true,"big":12345678901234567890,"neg":-1.5,"nil":null}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"topic": "t", "queueId": "0", "order": "true", "big": "12345678901234567890", "neg": "-1.5", "nil": ""}
	if len(c.ExtFields) != len(want) {
		t.Fatalf("extFields %q, want %q", c.ExtFields, want)
	}
	for k, v := range want {
		if got, ok := c.ExtFields[k]; !ok || got != v {
			t.Fatalf("extFields %q, want %q", c.ExtFields, want)
		}
	}
	for _, bad := range []string{`{"a":{}}`, `{"a":[1]}`, `[]`, `"x"`, `{"a":tru}`, `{"a":1},"version":"x"`} {
		if _, err := DecodeFrame(frameOf(`{"code":105,"extFields":` + bad + `}`)); !errors.Is(err, ErrMalformed) {
			t.Errorf("extFields %s: %v, want ErrMalformed", bad, err)
		}
	}
}

// staticTopicInfo is a TopicQueueMappingInfo as a 5.x broker registers it
// for a static topic (BrokerController.registerBrokerAll, cloneAsMappingInfo):
// fastjson's defaults write its Integer-keyed currIdMap with bare keys.
const staticTopicInfo = `{"bname":"broker-a","currIdMap":{0:0,1:1},"dirty":false,"epoch":1735689600000,` +
	`"scope":"__global__","topic":"static","totalQueues":2}`

// TestRegisterBodyWithStaticTopic: a 5.x broker that hosts a static topic
// (mqadmin updateStaticTopic) registers a body with bare integer keys in
// topicQueueMappingInfoMap, which a NameServer's fastjson reads. Refusing it
// refused every registration of that broker.
func TestRegisterBodyWithStaticTopic(t *testing.T) {
	js := `{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1735689600000},` +
		`"mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":1735689600123},"topicConfigTable":{` +
		`"static":{"attributes":{},"order":false,"perm":6,"readQueueNums":2,"topicFilterType":"SINGLE_TAG","topicName":"static","topicSysFlag":0,"writeQueueNums":2},` +
		`"TopicTest":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4}},` +
		`"topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{"static":` + staticTopicInfo + `}}}`
	b, err := DecodeRegisterBrokerBody([]byte(js), false, 0)
	if err != nil {
		t.Fatalf("JSON body with a static topic: %v", err)
	}
	if len(b.TopicConfigTable) != 2 || b.TopicConfigTable["static"].ReadQueueNums != 2 || b.DataVersion.Counter != 3 {
		t.Fatalf("JSON body with a static topic: %+v", b)
	}
	if _, ok := b.TopicQueueMappingInfoMap["static"]; !ok {
		t.Fatalf("mapping info: %+v", b.TopicQueueMappingInfoMap)
	}

	// The compressed form carries the same mapping info as a part.
	body := RegisterBrokerBody{DataVersion: b.DataVersion, TopicConfigTable: b.TopicConfigTable,
		TopicQueueMappingInfoMap: map[string]json.RawMessage{"static": json.RawMessage(staticTopicInfo)}}
	z, err := DecodeRegisterBrokerBody(body.EncodeCompressed(), true, 0)
	if err != nil {
		t.Fatalf("compressed body with a static topic: %v", err)
	}
	if len(z.TopicConfigTable) != 2 || string(z.TopicQueueMappingInfoMap["static"]) != staticTopicInfo {
		t.Fatalf("compressed body with a static topic: %+v", z)
	}
}

// TestJSONEscapingOfDELAndSeparators: fastjson escapes U+007F-U+009F and
// the JavaScript line separators U+2028/U+2029 as \uXXXX by default
// (SerializeWriter's special characters), and BrowserCompatible escapes
// DEL with everything from 127 up. A remark echoing a peer's topic name
// carries them byte for byte as a NameServer writes it.
func TestJSONEscapingOfDELAndSeparators(t *testing.T) {
	frame, _ := TopicNotExistResponse(&Command{}, "a\x7fb\u0085c\u2028d\u2029e\u00a0f").Encode()
	if want := `topic: a\u007Fb\u0085c\u2028d\u2029e` + "\u00a0f"; !bytes.Contains(frame, []byte(want)) {
		t.Fatalf("remark written as %s, want it to contain %s", frame, want)
	}
	r := &TopicRouteData{BrokerDatas: []BrokerData{{BrokerName: "b\x7f", BrokerAddrs: map[int64]string{}}}}
	if got := string(r.Encode(Standard)); !strings.Contains(got, `"brokerName":"b\u007F"`) {
		t.Fatalf("standard dialect wrote %s", got)
	}
	if got := string(r.Encode(Legacy)); !strings.Contains(got, `"brokerName":"b\u007F"`) {
		t.Fatalf("legacy dialect wrote %s", got)
	}
}
