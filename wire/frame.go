package wire

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Protocol constants.
const (
	// ALPN is the TLS application protocol of this protocol version.
	ALPN = "edgereg/1"
	// FrameHeaderLen is the size of a frame's length prefix.
	FrameHeaderLen = 4
	// MaxFrameLen is the hard cap on any frame, whatever a node is
	// configured to accept: 64 MiB.
	MaxFrameLen = 64 << 20
	// DefaultMaxRequestLen caps frames from clients: 1 MiB holds a poll of
	// thousands of topics.
	DefaultMaxRequestLen = 1 << 20
	// DefaultMaxBrokerFrameLen caps frames from brokers and operators: a
	// full registration of 100k topics is about 3.5 MB.
	DefaultMaxBrokerFrameLen = 16 << 20
	// DefaultMaxResponseLen is what a client accepts from a node.
	DefaultMaxResponseLen = MaxFrameLen
)

// ErrEmptyFrame is returned for a frame of length zero.
var ErrEmptyFrame = errors.New("empty frame")

// FrameTooLargeError reports a frame over the limit; it is a *Error with
// CodeFrameTooLarge once sent.
type FrameTooLargeError struct{ Len, Limit int }

// Error gives the frame's declared length and the limit it exceeds.
func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("frame of %d bytes exceeds limit %d", e.Len, e.Limit)
}

// Is makes errors.Is(err, ErrFrameTooLarge) hold.
func (e *FrameTooLargeError) Is(target error) bool { return target == ErrFrameTooLarge }

// ReadFrame reads one frame of at most limit bytes. It returns io.EOF when
// the stream ends cleanly before a frame starts, and io.ErrUnexpectedEOF
// when it ends inside one. A frame over the limit is refused before any of
// its body is read.
func ReadFrame(r io.Reader, limit int) (Frame, error) {
	var f Frame
	buf, err := ReadFrameBytes(r, limit)
	if err != nil {
		return f, err
	}
	if err := DecodeFrame(buf, &f); err != nil {
		return f, err
	}
	return f, nil
}

// ReadFrameBytes reads one length-prefixed frame's bytes without decoding
// them.
func ReadFrameBytes(r io.Reader, limit int) ([]byte, error) {
	var hdr [FrameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	limit = min(limit, MaxFrameLen)
	switch {
	case n == 0:
		return nil, ErrEmptyFrame
	case n > limit:
		return nil, &FrameTooLargeError{Len: n, Limit: limit}
	}
	return ReadBody(r, n, nil)
}

// firstBodyChunk is how much of a frame's body a reader allocates before
// any of it has arrived: enough for a typical request in one piece.
const firstBodyChunk = 512

// ReadBody reads the n bytes of a frame's body, n as its header declared.
// The buffer grows as bytes arrive (doubling, up to n), never to n up
// front: a peer that declares a large frame and sends nothing more costs
// the reader firstBodyChunk bytes, not n. When reserve is not nil it is
// called before each growth with the bytes to add, and may refuse with an
// error that ReadBody returns. It returns io.ErrUnexpectedEOF when the
// stream ends inside the body.
func ReadBody(r io.Reader, n int, reserve func(int) error) ([]byte, error) {
	return ReadBodyInto(nil, r, n, reserve)
}

// ReadBodyInto is ReadBody reading into buf's memory while it has room:
// a reader that keeps one buffer across frames allocates none for a frame
// that fits. reserve is called as ReadBody calls it, for the bytes the
// body is let fill as it arrives, whatever buf's capacity.
func ReadBodyInto(buf []byte, r io.Reader, n int, reserve func(int) error) ([]byte, error) {
	size := min(n, firstBodyChunk)
	if reserve != nil {
		if err := reserve(size); err != nil {
			return nil, err
		}
	}
	if buf == nil || cap(buf) < size {
		buf = make([]byte, 0, size)
	}
	buf = buf[:0]
	limit := size // what the body may fill so far: reserved, allocated
	for len(buf) < n {
		if len(buf) == limit {
			grow := min(2*limit, n) - limit
			if reserve != nil {
				if err := reserve(grow); err != nil {
					return nil, err
				}
			}
			limit += grow
			if cap(buf) < limit {
				grown := make([]byte, len(buf), limit)
				copy(grown, buf)
				buf = grown
			}
		}
		m, err := r.Read(buf[len(buf):limit])
		buf = buf[:len(buf)+m]
		if err != nil && len(buf) < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// DecodeFrame decodes a frame's CBOR bytes with the protocol's limits.
// f.Body may share b's memory (it does for common frames): b must not be
// reused while the frame's body is in use. Keys inside the body are left to DecodeBody.
// Common frames (type, id and body) are read by hand without reflection
// or allocation; anything else, every frame refused included, goes to the
// reflection decoder, and both accept, refuse and decode the same bytes
// alike (FuzzFrameDecode compares them).
func DecodeFrame(b []byte, f *Frame) error {
	if decodeFrameFast(b, f) {
		return nil
	}
	// Reflection makes the frame it decodes into escape; decoding into a
	// copy keeps the caller's frame (on the stack of every stream's read
	// loop) from escaping on the common path too.
	g := new(Frame)
	*g = *f
	err := unmarshalFrame(b, g)
	*f = *g
	if err != nil {
		return fmt.Errorf("malformed frame: %w", err)
	}
	return nil
}

// AppendFrame appends f, length prefix included, to dst. A body it is
// given must be one well-formed CBOR item, which it checks, never putting
// a malformed item on the wire; a body this package encodes need not be
// checked, and AppendRequest, AppendResponse and AppendRoutesFrame encode
// theirs straight into the frame without the check.
func AppendFrame(dst []byte, f *Frame) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	if f.Error == nil {
		if len(f.Body) > 0 {
			if err := decMode.Wellformed(f.Body); err != nil {
				return dst[:start], fmt.Errorf("frame body is not one well-formed CBOR item: %w", err)
			}
		}
		dst = appendFrameMap(dst, f)
	} else {
		b, err := encMode.Marshal(f)
		if err != nil {
			return dst[:start], err
		}
		dst = append(dst, b...)
	}
	n := len(dst) - start - FrameHeaderLen
	if n > MaxFrameLen {
		return dst[:start], &FrameTooLargeError{Len: n, Limit: MaxFrameLen}
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(n))
	return dst, nil
}

// AppendRoutesFrame appends a response frame of type t and id whose body
// is r, length prefix included: the bytes AppendFrame gives for a Frame
// with Body AppendRoutes(nil, r), encoded in one pass straight into dst.
// It skips the copy of the body and the check AppendFrame makes that a
// body it is given is one well-formed CBOR item: this package's encoder
// makes this one (each result's Route must be well-formed, as for
// AppendRoutes). TestAppendRoutesFrame compares it with AppendFrame.
func AppendRoutesFrame(dst []byte, t Type, id uint64, r *Routes) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	pairs := byte(2) // type and body: a Routes body is never empty
	if id != 0 {
		pairs++
	}
	dst = append(dst, 0xa0|pairs, 0x01)
	dst = appendUint(dst, uint64(t))
	if id != 0 {
		dst = append(dst, 0x02)
		dst = appendUint(dst, id)
	}
	dst = AppendRoutes(append(dst, 0x03), r)
	n := len(dst) - start - FrameHeaderLen
	if n > MaxFrameLen {
		return dst[:start], &FrameTooLargeError{Len: n, Limit: MaxFrameLen}
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(n))
	return dst, nil
}

// appendFrameMap encodes a frame without an error by hand, byte for byte
// what the deterministic encoder gives (keys 1, 2, 3 in order, shortest
// integers, the body embedded as it is), without reflection or a copy of
// the body through a temporary buffer: every request and response passes
// here.
func appendFrameMap(dst []byte, f *Frame) []byte {
	pairs := byte(1)
	if f.ID != 0 {
		pairs++
	}
	if len(f.Body) > 0 {
		pairs++
	}
	dst = append(dst, 0xa0|pairs, 0x01)
	dst = appendUint(dst, uint64(f.Type))
	if f.ID != 0 {
		dst = append(dst, 0x02)
		dst = appendUint(dst, f.ID)
	}
	if len(f.Body) > 0 {
		dst = append(dst, 0x03)
		dst = append(dst, f.Body...)
	}
	return dst
}

// appendUint appends a CBOR unsigned integer (major type 0) in its
// shortest form.
func appendUint(dst []byte, v uint64) []byte {
	return appendHead(dst, 0, v)
}

// WriteFrame writes f as one length-prefixed frame with a single Write.
func WriteFrame(w io.Writer, f *Frame) error {
	buf, err := AppendFrame(nil, f)
	if err != nil {
		return err
	}
	_, err = w.Write(buf)
	return err
}

// NewRequest builds a request frame with body encoded by MarshalBody;
// body may be nil. WriteFrame and AppendFrame check the body as they check
// any Body: the Frame is the caller's to change. AppendRequest builds the
// same frame's bytes in one pass without that check.
func NewRequest(t Type, id uint64, body any) (*Frame, error) {
	f := &Frame{Type: t, ID: id}
	if body != nil {
		b, err := MarshalBody(body)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", t, err)
		}
		f.Body = b
	}
	return f, nil
}

// DecodeBody decodes a frame's body into v. An absent body leaves v zero.
func (f *Frame) DecodeBody(v any) error {
	if len(f.Body) == 0 {
		return nil
	}
	if err := Unmarshal(f.Body, v); err != nil {
		return Errorf(CodeBadRequest, "malformed %s body: %v", f.Type, err)
	}
	return nil
}

// ClientTLS returns a copy of conf ready to dial nodes with: a session
// cache for one-round-trip resumption on reconnects, and the ALPN when
// conf names none. A nil conf stays nil.
func ClientTLS(conf *tls.Config) *tls.Config {
	if conf == nil {
		return nil
	}
	conf = conf.Clone()
	if conf.ClientSessionCache == nil {
		conf.ClientSessionCache = tls.NewLRUClientSessionCache(64)
	}
	if len(conf.NextProtos) == 0 {
		conf.NextProtos = []string{ALPN}
	}
	return conf
}
