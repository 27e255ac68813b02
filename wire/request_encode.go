package wire

import "fmt"

// AppendRequest appends a request frame, length prefix included, to dst:
// byte for byte what AppendFrame gives for NewRequest(t, id, body), in
// one buffer the caller may reuse for every request. body may be nil. The
// body is encoded straight into dst, by hand for the messages that have a
// hand-written encoder (get-routes without labels, register, heartbeat,
// the acks), by Marshal for the others; either way it is one well-formed
// item, so it is not checked again as AppendFrame checks a body it is
// given. On an error dst is returned as it was.
func AppendRequest(dst []byte, t Type, id uint64, body any) ([]byte, error) {
	return appendBodyFrame(dst, t, id, body)
}

// AppendResponse appends a response frame without an error, length prefix
// included, whose body is body encoded (none when body is nil): byte for
// byte what AppendFrame gives for a Frame{Type: t, ID: id} with Body
// MarshalBody(body), encoded in one pass into dst as AppendRequest does,
// without a copy of the body or a check of it. A node answers with it.
func AppendResponse(dst []byte, t Type, id uint64, body any) ([]byte, error) {
	return appendBodyFrame(dst, t, id, body)
}

// appendBodyFrame is AppendRequest and AppendResponse: a frame without an
// error has the same form either way.
func appendBodyFrame(dst []byte, t Type, id uint64, body any) ([]byte, error) {
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
		var err error
		if dst, err = appendBody(append(dst, 0x03), body); err != nil {
			return dst[:start], fmt.Errorf("encode %s: %w", t, err)
		}
	}
	n := len(dst) - start - FrameHeaderLen
	if n > MaxFrameLen {
		return dst[:start], &FrameTooLargeError{Len: n, Limit: MaxFrameLen}
	}
	dst[start], dst[start+1], dst[start+2], dst[start+3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return dst, nil
}

// appendBody appends body's encoding to dst: MarshalBody's bytes, without
// a buffer of their own. The messages with a hand-written encoder are
// encoded by it, by pointer or by value (a nil pointer is Marshal's null);
// anything else by Marshal, whose output is well-formed.
func appendBody(dst []byte, body any) ([]byte, error) {
	switch m := body.(type) {
	case *GetRoutes:
		if m != nil {
			if b, ok := appendGetRoutes(dst, m); ok {
				return b, nil
			}
		}
	case *Register:
		if m != nil {
			return AppendRegister(dst, m), nil
		}
	case Register:
		return AppendRegister(dst, &m), nil
	case *Heartbeat:
		if m != nil {
			return AppendHeartbeat(dst, m), nil
		}
	case Heartbeat:
		return AppendHeartbeat(dst, &m), nil
	case *LeaseAck:
		if m != nil {
			return AppendLeaseAck(dst, m), nil
		}
	case LeaseAck:
		return AppendLeaseAck(dst, &m), nil
	case *RegisterAck:
		if m != nil {
			return AppendRegisterAck(dst, m), nil
		}
	case RegisterAck:
		return AppendRegisterAck(dst, &m), nil
	}
	b, err := Marshal(body)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
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
