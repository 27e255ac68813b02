// Package remoting speaks Apache RocketMQ's TCP "remoting" protocol as a
// NameServer does, so unmodified RocketMQ brokers and clients can use
// edgereg: the frame codec (JSON and ROCKETMQ binary headers, the 16 MiB
// frame cap applied before a body is read), the request and response codes a
// NameServer handles, the bodies it reads and writes in fastjson's byte
// layout (both brokerAddrs dialects, the zlib-compressed REGISTER_BROKER
// body), typed views of the header extFields, and a TCP Server with
// connection limits and a bounded worker pool that calls a Handler.
//
// A frame is
//
//	int32 length | int32 serializeType<<24 | headerLen | header | body
//
// with length = 4 + headerLen + len(body). What this package writes is what
// a RocketMQ 5.3 NameServer writes: byte for byte for every response fixture
// in testdata/rocketmq (frames made by RocketMQ's own serializer code).
// Responses say language JAVA and version 479 (V5_3_3), as that NameServer's
// do; no client reads either.
//
// The package imports nothing from edgereg: the node (node/remoting.go) and
// the gateway implement Handler against their own state.
package remoting
