package remoting

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// Fuzz targets for the decoders a peer reaches. Seeds are the RocketMQ
// fixtures. Run one with
//
//	go test ./wire/remoting -run '^$' -fuzz '^FuzzReadCommand$' -fuzztime 300000x -parallel 1

func fixtureSeeds(f *testing.F, match func(name string) bool) {
	entries, err := os.ReadDir(fixtureDir)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		if match(e.Name()) {
			f.Add(readFixture(f, e.Name()))
		}
	}
}

// FuzzReadCommand: any bytes either decode to a command that encodes and
// decodes to the same frame, or give an error; never a panic, and never more
// than the cap is buffered.
func FuzzReadCommand(f *testing.F) {
	fixtureSeeds(f, func(n string) bool { return strings.HasSuffix(n, ".hex") && !strings.Contains(n, "body") })
	bin, _ := (&Command{Code: 105, Remark: "r", ExtFields: map[string]string{"topic": "t"}, SerializeType: SerializeRocketMQ}).Encode()
	f.Add(bin)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ReadCommand(bytes.NewReader(data), 1<<16)
		if err != nil {
			return
		}
		frame, err := c.Encode()
		if err != nil {
			return // e.g. a key too long for the binary header cannot be re-encoded
		}
		c2, err := DecodeFrame(frame)
		if err != nil {
			t.Fatalf("our own encoding does not decode: %v", err)
		}
		again, _ := c2.Encode()
		if !bytes.Equal(again, frame) {
			t.Fatalf("encoding is not stable\n%q\n%q", frame, again)
		}
	})
}

// FuzzDecodeBodies feeds the same bytes to every body decoder.
func FuzzDecodeBodies(f *testing.F) {
	fixtureSeeds(f, func(n string) bool { return strings.HasSuffix(n, ".json") || strings.Contains(n, "body_compressed") })
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, err := DecodeTopicRouteData(data); err == nil {
			if _, err := DecodeTopicRouteData(r.Encode(Legacy)); err != nil {
				t.Fatalf("legacy re-encoding does not decode: %v", err)
			}
			if _, err := DecodeTopicRouteData(r.Encode(Standard)); err != nil {
				t.Fatalf("standard re-encoding does not decode: %v", err)
			}
		}
		if c, err := DecodeClusterInfo(data); err == nil {
			if _, err := DecodeClusterInfo(c.Encode(Legacy)); err != nil {
				t.Fatalf("cluster info re-encoding does not decode: %v", err)
			}
		}
		DecodeTopicList(data)
		DecodeKVTable(data)
		DecodeDataVersion(data)
		DecodeBrokerMemberGroup(data)
		for _, compressed := range []bool{false, true} {
			if b, err := DecodeRegisterBrokerBody(data, compressed, 1<<20); err == nil {
				if _, err := DecodeRegisterBrokerBody(b.EncodeJSON(), false, 0); err != nil {
					t.Fatalf("register body re-encoding does not decode: %v", err)
				}
			}
		}
		QuoteBareKeys(data)
	})
}
