package wire_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/edgereg/edgereg/wire"
)

// A frame is a 4-byte big-endian length and a CBOR map: these are the bytes
// of PROTOCOL.md 14.1, a ping with request id 11 and no body.
func ExampleAppendRequest() {
	b, err := wire.AppendRequest(nil, wire.TypePing, 11, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%x\n", b)
	// Output:
	// 00000005a20111020b
}

// Reading a get-routes request as a node does: ReadFrame refuses a frame
// over its limit before reading its body, and DecodeGetRoutes decodes the
// body under the protocol's limits.
func ExampleReadFrame() {
	req, err := wire.AppendRequest(nil, wire.TypeGetRoutes, 7, &wire.GetRoutes{
		Topics: []wire.TopicVersion{{Topic: "orders"}, {Topic: "payments", Version: 0x2a}}})
	if err != nil {
		log.Fatal(err)
	}
	f, err := wire.ReadFrame(bytes.NewReader(req), 1<<20)
	if err != nil {
		log.Fatal(err)
	}
	var q wire.GetRoutes
	if err := f.DecodeGetRoutes(&q); err != nil {
		log.Fatal(err)
	}
	fmt.Println(f.Type, f.ID, q.Topics)

	_, err = wire.ReadFrame(bytes.NewReader(req), 8)
	fmt.Println(err)
	// Output:
	// get-routes 7 [{orders 0} {payments 42}]
	// frame of 32 bytes exceeds limit 8
}
