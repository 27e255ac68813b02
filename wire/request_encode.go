package wire

import "fmt"

// AppendRequest appends a request frame, length prefix included, to dst:
// byte for byte what AppendFrame gives for NewRequest(t, id, body), in
// one buffer the caller may reuse for every request. A get-routes body
// (*GetRoutes) is encoded by hand, the others by Marshal; both give one
// well-formed item, so the body needs no second check. body may be nil.
func AppendRequest(dst []byte, t Type, id uint64, body any) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	pairs := byte(1)
	if id != 0 {
		pairs++
	}
	if body != nil {
		pairs++
	}
	dst = appendUint(append(dst, 0xa0|pairs, 0x01), uint64(t))
	if id != 0 {
		dst = appendUint(append(dst, 0x02), id)
	}
	if body != nil {
		dst = append(dst, 0x03)
		var ok bool
		if q, isQuery := body.(*GetRoutes); isQuery && q != nil {
			dst, ok = appendGetRoutes(dst, q)
		}
		if !ok {
			b, err := Marshal(body)
			if err != nil {
				return dst[:start], fmt.Errorf("encode %s: %w", t, err)
			}
			dst = append(dst, b...)
		}
	}
	n := len(dst) - start - FrameHeaderLen
	if n > MaxFrameLen {
		return dst[:start], &FrameTooLargeError{Len: n, Limit: MaxFrameLen}
	}
	dst[start], dst[start+1], dst[start+2], dst[start+3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return dst, nil
}

// AppendGetRoutes appends the CBOR encoding of q to dst, byte for byte
// what Marshal gives, without reflection: every route read sends one. A
// query with client labels (a map, whose keys the deterministic encoder
// sorts) is left to Marshal. TestAppendGetRoutes checks it against
// Marshal and the vectors.
func AppendGetRoutes(dst []byte, q *GetRoutes) ([]byte, error) {
	if b, ok := appendGetRoutes(dst, q); ok {
		return b, nil
	}
	b, err := Marshal(q)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// appendGetRoutes encodes {1: [{1: topic, 2: version}...], 2: {1: zone}},
// empty fields omitted as Marshal omits them, or reports false for a
// query with labels, leaving dst as it was.
func appendGetRoutes(dst []byte, q *GetRoutes) ([]byte, bool) {
	if len(q.Client.Labels) > 0 {
		return dst, false
	}
	pairs := byte(1)
	if q.Client.Zone != "" {
		pairs++
	}
	dst = append(dst, 0xa0|pairs, 0x01)
	dst = appendHead(dst, 0x80, uint64(len(q.Topics)))
	for i := range q.Topics {
		tv := &q.Topics[i]
		if tv.Version != 0 {
			dst = append(dst, 0xa2, 0x01)
		} else {
			dst = append(dst, 0xa1, 0x01)
		}
		dst = appendHead(dst, 0x60, uint64(len(tv.Topic)))
		dst = append(dst, tv.Topic...)
		if tv.Version != 0 {
			dst = appendUint(append(dst, 0x02), tv.Version)
		}
	}
	if q.Client.Zone != "" {
		dst = append(dst, 0x02, 0xa1, 0x01)
		dst = appendHead(dst, 0x60, uint64(len(q.Client.Zone)))
		dst = append(dst, q.Client.Zone...)
	}
	return dst, true
}
