package remoting

import (
	"encoding/binary"
	"testing"
)

// jsonFrame is a frame with header as its JSON header and no body.
func jsonFrame(header string) []byte {
	f := binary.BigEndian.AppendUint32(nil, uint32(4+len(header)))
	f = binary.BigEndian.AppendUint32(f, uint32(len(header)))
	return append(f, header...)
}

// A request code is a Java int in a JSON header. One that does not fit the
// 16 bits of Command.Code is a code no NameServer handles: a 5.x NameServer
// answers REQUEST_CODE_NOT_SUPPORTED naming it and keeps the connection, so
// the server does too (and answers no oneway request), without a handler
// ever seeing a wrapped code (65641 would wrap to 105).
func TestRmqWideCodeNotSupported(t *testing.T) {
	_, addr := startServer(t, echo(nil), Limits{})
	c := dial(t, addr)
	c.nc.Write(jsonFrame(`{"code":65641,"flag":0,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":479}`))
	c.nc.Write(jsonFrame(`{"code":-70000,"flag":2,"language":"JAVA","opaque":6,"version":479}`))
	c.send(NewRequest(105, 7, map[string]string{"v": "after"}, nil))
	r := c.recv()
	if r.Opaque != 5 || r.Code != RequestCodeNotSupported || r.Remark != " request type 65641 not supported" || !r.IsResponse() {
		t.Fatalf("answer %+v, want opaque 5 code 3 %q", r, " request type 65641 not supported")
	}
	if r := c.recv(); r.Opaque != 7 || r.Remark != "after" {
		t.Fatalf("next answer %+v, want the request after (the oneway one is never answered)", r)
	}
}

// A version is a Java int too; a NameServer compares it (>= V4_9_4 for the
// route dialect) or clamps it to its last known version. One beyond 16
// bits is read as the nearest int16, not a malformed frame.
func TestRmqWideVersionClamped(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   int16
	}{
		{`{"code":105,"opaque":1,"version":100000}`, 32767},
		{`{"code":105,"opaque":1,"version":-100000}`, -32768},
	} {
		c, err := DecodeFrame(jsonFrame(tc.header))
		if err != nil || c.Version != tc.want {
			t.Errorf("%s: %+v %v, want version %d", tc.header, c, err, tc.want)
		}
	}
}
