package wire

import (
	"encoding/binary"
	"unicode/utf8"
)

// AppendRoutes appends the CBOR encoding of r to dst, byte for byte what
// Marshal gives (core deterministic: keys in order, shortest integers,
// empty fields left out, no results as an empty array), without
// reflection: a get-routes response is the node's hottest message. Each
// result's Route must already be one well-formed CBOR item, as every route
// a node holds is (the registry encodes them; a route policy's output is
// re-encoded by the host); it is embedded as it is. TestAppendRoutes checks
// it against Marshal and the test vectors.
func AppendRoutes(dst []byte, r *Routes) []byte {
	pairs := byte(1)
	if len(r.Groups) > 0 {
		pairs++
	}
	if r.Node != (NodeState{}) {
		pairs++
	}
	dst = append(dst, 0xa0|pairs, 0x01)
	dst = appendHead(dst, 0x80, uint64(len(r.Results)))
	for i := range r.Results {
		dst = appendRouteResult(dst, &r.Results[i])
	}
	if len(r.Groups) > 0 {
		dst = append(dst, 0x02)
		dst = appendHead(dst, 0x80, uint64(len(r.Groups)))
		for i := range r.Groups {
			dst = appendGroupFreshness(dst, &r.Groups[i])
		}
	}
	if r.Node != (NodeState{}) {
		dst = append(dst, 0x03)
		dst = appendNodeState(dst, &r.Node)
	}
	return dst
}

// appendGroupFreshness encodes {1: name, 2: age, 3: deadline-in}, zero
// integers omitted, as Marshal does.
func appendGroupFreshness(dst []byte, g *GroupFreshness) []byte {
	pairs := byte(1)
	if g.AgeMs != 0 {
		pairs++
	}
	if g.DeadlineInMs != 0 {
		pairs++
	}
	dst = append(dst, 0xa0|pairs, 0x01)
	dst = appendHead(dst, 0x60, uint64(len(g.BrokerName)))
	dst = append(dst, g.BrokerName...)
	if g.AgeMs != 0 {
		dst = appendInt(append(dst, 0x02), g.AgeMs)
	}
	if g.DeadlineInMs != 0 {
		dst = appendInt(append(dst, 0x03), g.DeadlineInMs)
	}
	return dst
}

// appendNodeState encodes a non-empty NodeState, empty fields omitted.
func appendNodeState(dst []byte, ns *NodeState) []byte {
	pairs := byte(0)
	if ns.NodeID != "" {
		pairs++
	}
	if ns.StartedMs != 0 {
		pairs++
	}
	if ns.WarmingUp {
		pairs++
	}
	dst = append(dst, 0xa0|pairs)
	if ns.NodeID != "" {
		dst = appendHead(append(dst, 0x01), 0x60, uint64(len(ns.NodeID)))
		dst = append(dst, ns.NodeID...)
	}
	if ns.StartedMs != 0 {
		dst = appendInt(append(dst, 0x02), ns.StartedMs)
	}
	if ns.WarmingUp {
		dst = append(dst, 0x03, 0xf5)
	}
	return dst
}

// appendInt appends a CBOR integer: major type 0 for v >= 0, else major
// type 1 with argument -1-v.
func appendInt(dst []byte, v int64) []byte {
	if v >= 0 {
		return appendHead(dst, 0x00, uint64(v))
	}
	return appendHead(dst, 0x20, uint64(-1-v))
}

func appendRouteResult(dst []byte, res *RouteResult) []byte {
	pairs := byte(1)
	if res.Status != 0 {
		pairs++
	}
	if res.Version != 0 {
		pairs++
	}
	if len(res.Route) > 0 {
		pairs++
	}
	dst = append(dst, 0xa0|pairs, 0x01)
	dst = appendHead(dst, 0x60, uint64(len(res.Topic)))
	dst = append(dst, res.Topic...)
	if res.Status != 0 {
		dst = append(dst, 0x02)
		dst = appendUint(dst, uint64(res.Status))
	}
	if res.Version != 0 {
		dst = append(dst, 0x03)
		dst = appendUint(dst, res.Version)
	}
	if len(res.Route) > 0 {
		dst = append(dst, 0x04)
		dst = append(dst, res.Route...)
	}
	return dst
}

// appendHead appends a CBOR item head: major type (its top three bits in
// major) and argument v in the shortest form.
func appendHead(dst []byte, major byte, v uint64) []byte {
	switch {
	case v < 24:
		return append(dst, major|byte(v))
	case v <= 0xff:
		return append(dst, major|24, byte(v))
	case v <= 0xffff:
		return binary.BigEndian.AppendUint16(append(dst, major|25), uint16(v))
	case v <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(dst, major|26), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, major|27), v)
}

// DecodeGetRoutes decodes a get-routes request body into q, as
// Frame.DecodeBody does. The common shape (topics and versions, no client
// attributes, definite lengths, keys in order) is read by hand without
// reflection; anything else, including every input the general decoder
// refuses, goes to the general decoder, so the result and the errors are
// the same (TestDecodeGetRoutes compares them, FuzzDecodeGetRoutes too).
func (f *Frame) DecodeGetRoutes(q *GetRoutes) error {
	if len(f.Body) > 0 && decodeGetRoutesFast(f.Body, q) {
		return nil
	}
	*q = GetRoutes{}
	return f.DecodeBody(q)
}

// decodeGetRoutesFast reads {1: [{1: topic, 2: version}, ...]} and reports
// whether b had exactly that shape, into q's Topics array when it is large
// enough. The topic names are substrings of one
// copy of b, one allocation instead of one per topic: a get-routes request
// lives for one response, so no name outlives it to pin the copy.
func decodeGetRoutesFast(body []byte, q *GetRoutes) bool {
	src := string(body)
	major, pairs, b, err := head(body)
	if err != nil || major != 5 || pairs != 1 {
		return false
	}
	major, key, b, err := head(b)
	if err != nil || major != 0 || key != 1 {
		return false
	}
	major, n, b, err := head(b)
	// Each element takes at least 3 bytes: a bound before allocating.
	if err != nil || major != 4 || n > MaxArrayElements || n > uint64(len(b))/3 {
		return false
	}
	topics := q.Topics[:0] // q's array when it has room: a stream's request loop reuses one
	if uint64(cap(topics)) < n || topics == nil {
		topics = make([]TopicVersion, 0, n)
	}
	topics = topics[:n]
	for i := range topics {
		topics[i] = TopicVersion{}
		if b, err = decodeTopicVersionFast(b, src[len(body)-len(b):], &topics[i]); err != nil {
			return false
		}
	}
	if len(b) != 0 {
		return false
	}
	*q = GetRoutes{Topics: topics}
	return true
}

// decodeTopicVersionFast decodes one {1: topic, 2: version} from b; src
// is the same bytes as a string, where the topic name is taken from.
func decodeTopicVersionFast(b []byte, src string, tv *TopicVersion) ([]byte, error) {
	start := len(b)
	major, pairs, b, err := head(b)
	if err != nil || major != 5 || pairs < 1 || pairs > 2 {
		return nil, errMalformed
	}
	major, key, b, err := head(b)
	if err != nil || major != 0 || key != 1 {
		return nil, errMalformed
	}
	major, size, b, err := head(b)
	if err != nil || major != 3 || size > uint64(len(b)) || !utf8.Valid(b[:size]) {
		return nil, errMalformed
	}
	at := start - len(b)
	tv.Topic, b = src[at:at+int(size)], b[size:]
	if pairs == 2 {
		major, key, b, err = head(b)
		if err != nil || major != 0 || key != 2 {
			return nil, errMalformed
		}
		if major, tv.Version, b, err = head(b); err != nil || major != 0 {
			return nil, errMalformed
		}
	}
	return b, nil
}

// DecodeRoutes decodes a get-routes response body into r, as
// Frame.DecodeBody does. The shape a node sends, freshness and node state
// included, is read by hand (routes_decode.go); any other shape goes to
// the general decoder, so the result and the errors are the same
// (TestDecodeRoutes and FuzzDecodeRoutes compare them).
//
// Decoding into an r that holds an earlier answer reuses its Results and
// Groups arrays when they are large enough, and the topic, group and node
// names r holds where the answer repeats them, so a client polling in a
// loop allocates them once: a caller that keeps one answer while decoding
// the next into the same r must copy the slices out first. Route bytes
// are new in every answer (the new strings and routes of one answer share
// one copy of its body, one allocation); a RouteResult or GroupFreshness
// copied out of an earlier answer stays valid. A client that reads a
// whole answer frame decodes it with DecodeRoutesFrame, which walks the
// body once.
func (f *Frame) DecodeRoutes(r *Routes) error {
	if len(f.Body) > 0 && decodeRoutesFast(f.Body, r) {
		return nil
	}
	*r = Routes{}
	return f.DecodeBody(r)
}
