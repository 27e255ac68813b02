package remoting

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Errors a frame decoder returns; they are wrapped with detail, test with
// errors.Is. After either, the connection cannot be resynchronised.
var (
	// ErrFrameTooLarge: the declared frame length exceeds the cap. Nothing
	// past the length prefix has been read.
	ErrFrameTooLarge = errors.New("remoting: frame too large")
	// ErrMalformed: the frame or its header does not decode.
	ErrMalformed = errors.New("remoting: malformed frame")
)

// Defaults stamped on commands this package creates. A 5.3.3 NameServer
// stamps its responses JAVA and 479; clients read neither, and the fixtures
// taken from that NameServer are reproduced byte for byte.
const (
	DefaultLanguage = "JAVA"
	DefaultVersion  = V5_3_3
)

// Command is one RocketMQ remoting command (RemotingCommand): a request, a
// response or a oneway request.
type Command struct {
	// Code is the request code in a request, the response code in a
	// response. rocketmq-client-go holds it in an int16.
	Code     int16
	Language string // "JAVA", "GO", …; informational
	Version  int16  // the sender's MQVersion ordinal
	// Opaque is the request id; a response carries its request's.
	Opaque int32
	Flag   int32 // FlagResponse, FlagOneway
	Remark string
	// ExtFields is the custom header, every value a string. A nil map is
	// omitted from a JSON header; an empty one is written as {} (RocketMQ
	// distinguishes the two and the fixtures show both).
	ExtFields map[string]string
	Body      []byte
	// SerializeType is the header encoding: SerializeJSON or
	// SerializeRocketMQ.
	SerializeType byte
}

// IsResponse reports whether c is a response.
func (c *Command) IsResponse() bool { return c.Flag&FlagResponse != 0 }

// IsOneway reports whether c is a oneway request, which is never answered.
func (c *Command) IsOneway() bool { return c.Flag&FlagOneway != 0 }

// Ext returns the value of an extFields entry, "" when absent.
func (c *Command) Ext(key string) string { return c.ExtFields[key] }

// ExtText returns an extFields entry as a NameServer prints the header
// field in a remark: "null" when absent (Java's string concatenation of a
// null field).
func (c *Command) ExtText(key string) string {
	if v, ok := c.ExtFields[key]; ok {
		return v
	}
	return "null"
}

// NewRequest returns a JSON request with the package's defaults.
func NewRequest(code int16, opaque int32, ext map[string]string, body []byte) *Command {
	return &Command{Code: code, Language: DefaultLanguage, Version: DefaultVersion,
		Opaque: opaque, ExtFields: ext, Body: body}
}

// NewResponse returns the response to req with a code and a remark ("" for
// none), no extFields and no body: what RocketMQ's
// RemotingCommand.createResponseCommand(code, remark) builds. It is JSON
// whatever the request's serialize type, as 5.x answers.
func NewResponse(req *Command, code int16, remark string) *Command {
	return &Command{Code: code, Language: DefaultLanguage, Version: DefaultVersion,
		Opaque: req.Opaque, Flag: FlagResponse, Remark: remark}
}

// NewHeaderResponse is NewResponse for a response with a header class: its
// extFields are written even when ext is empty ("extFields":{}).
func NewHeaderResponse(req *Command, code int16, remark string, ext map[string]string) *Command {
	resp := NewResponse(req, code, remark)
	if ext == nil {
		ext = map[string]string{}
	}
	resp.ExtFields = ext
	return resp
}

// ReadCommand reads one frame from r. maxFrame caps the frame's size,
// its 4 length bytes included (as Netty's LengthFieldBasedFrameDecoder
// counts); 0 means DefaultMaxFrame. The cap is applied before anything past
// the length prefix is read, and memory grows with the bytes received, never
// with the length the peer declared. At a clean end of stream before a frame
// starts it returns io.EOF; inside a frame io.ErrUnexpectedEOF.
func ReadCommand(r io.Reader, maxFrame int) (*Command, error) {
	length, err := readFrameLength(r, maxFrame)
	if err != nil {
		return nil, err
	}
	frame, err := readGrowing(r, length)
	if err != nil {
		return nil, err
	}
	return decodeFrame(frame)
}

// readFrameLength reads a frame's length prefix and checks it against the
// cap: what follows the prefix is that many bytes.
func readFrameLength(r io.Reader, maxFrame int) (int, error) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	var prefix [4]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return 0, err
	}
	length := int64(binary.BigEndian.Uint32(prefix[:]))
	if length > math.MaxInt32 || length+4 > int64(maxFrame) {
		return 0, fmt.Errorf("%w: %d bytes declared, cap %d", ErrFrameTooLarge, length+4, maxFrame)
	}
	if length < 4 {
		return 0, fmt.Errorf("%w: frame length %d is shorter than its header length field", ErrMalformed, length)
	}
	return int(length), nil
}

// readGrowing reads exactly n bytes, growing its buffer as bytes arrive.
func readGrowing(r io.Reader, n int) ([]byte, error) {
	const initial = 4 << 10
	buf := make([]byte, 0, min(n, initial))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(n, 2*cap(buf))-len(buf))
		}
		m, err := r.Read(buf[len(buf):min(n, cap(buf))])
		buf = buf[:len(buf)+m]
		if err != nil {
			if len(buf) == n {
				break
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// DecodeFrame decodes one whole frame, length prefix included.
func DecodeFrame(frame []byte) (*Command, error) {
	if len(frame) < 8 {
		return nil, fmt.Errorf("%w: %d bytes is shorter than the two length fields", ErrMalformed, len(frame))
	}
	if n := binary.BigEndian.Uint32(frame); int64(n) != int64(len(frame)-4) {
		return nil, fmt.Errorf("%w: length field says %d, frame holds %d", ErrMalformed, n, len(frame)-4)
	}
	return decodeFrame(frame[4:])
}

// decodeFrame decodes what follows the length prefix.
func decodeFrame(frame []byte) (*Command, error) {
	hl := binary.BigEndian.Uint32(frame)
	typ, headerLen := byte(hl>>24), int(hl&0xFFFFFF)
	if headerLen > len(frame)-4 {
		return nil, fmt.Errorf("%w: header length %d exceeds the frame's %d bytes", ErrMalformed, headerLen, len(frame)-4)
	}
	header := frame[4 : 4+headerLen]
	var c *Command
	var err error
	switch typ {
	case SerializeJSON:
		c, err = decodeJSONHeader(header)
	case SerializeRocketMQ:
		c, err = decodeBinaryHeader(header)
	default:
		err = fmt.Errorf("%w: unknown serialize type %d", ErrMalformed, typ)
	}
	if err != nil {
		return nil, err
	}
	c.SerializeType = typ
	if body := frame[4+headerLen:]; len(body) > 0 {
		c.Body = body
	}
	return c, nil
}

// wideCodeError is a JSON header whose code, a Java int, does not fit
// Command.Code: no NameServer handles such a code, and a 5.x NameServer
// answers REQUEST_CODE_NOT_SUPPORTED (the Server does so) rather than
// closing the connection. The frame was read whole, so the stream stays in
// step. To a decoder's caller it is ErrMalformed: a Command cannot hold it.
type wideCodeError struct {
	code         int64
	opaque, flag int32
}

func (e *wideCodeError) Error() string {
	return fmt.Sprintf("%v: code %d does not fit 16 bits", ErrMalformed, e.code)
}

func (e *wideCodeError) Unwrap() error { return ErrMalformed }

// response is a 5.x NameServer's answer to the request, nil for a oneway
// one.
func (e *wideCodeError) response() *Command {
	if e.flag&FlagOneway != 0 {
		return nil
	}
	resp := NewResponse(&Command{Opaque: e.opaque}, RequestCodeNotSupported, fmt.Sprintf(" request type %d not supported", e.code))
	resp.Flag = FlagResponse
	return resp
}

// jsonHeader is the JSON header as read. Code and version are read wide so
// that an out-of-range value is an error, not a silent wrap.
type jsonHeader struct {
	Code      *int64            `json:"code"`
	Language  string            `json:"language"`
	Version   int64             `json:"version"`
	Opaque    int64             `json:"opaque"`
	Flag      int64             `json:"flag"`
	Remark    *string           `json:"remark"`
	ExtFields map[string]string `json:"extFields"`
}

func decodeJSONHeader(b []byte) (*Command, error) {
	var h jsonHeader
	if err := json.Unmarshal(b, &h); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) || !strings.HasPrefix(te.Field, "extFields") {
			return nil, fmt.Errorf("%w: JSON header: %v", ErrMalformed, err)
		}
		if h, err = lenientJSONHeader(b); err != nil {
			return nil, fmt.Errorf("%w: JSON header: %v", ErrMalformed, err)
		}
	}
	if h.Code == nil {
		return nil, fmt.Errorf("%w: JSON header without code", ErrMalformed)
	}
	for _, f := range []struct {
		name     string
		v        int64
		min, max int64
	}{
		{"code", *h.Code, math.MinInt32, math.MaxInt32},
		{"version", h.Version, math.MinInt32, math.MaxInt32},
		{"opaque", h.Opaque, math.MinInt32, math.MaxInt32},
		{"flag", h.Flag, math.MinInt32, math.MaxInt32},
	} {
		if f.v < f.min || f.v > f.max {
			return nil, fmt.Errorf("%w: %s %d out of range", ErrMalformed, f.name, f.v)
		}
	}
	if *h.Code < math.MinInt16 || *h.Code > math.MaxInt16 {
		return nil, &wideCodeError{code: *h.Code, opaque: int32(h.Opaque), flag: int32(h.Flag)}
	}
	// A version is compared (>= V4_9_4) or clamped to the last known one
	// by a NameServer: the nearest int16 compares alike.
	version := int16(min(max(h.Version, math.MinInt16), math.MaxInt16))
	c := &Command{Code: int16(*h.Code), Language: h.Language, Version: version,
		Opaque: int32(h.Opaque), Flag: int32(h.Flag), ExtFields: h.ExtFields}
	if h.Remark != nil {
		c.Remark = *h.Remark
	}
	return c, nil
}

// lenientJSONHeader reads a header whose extFields are not all strings as
// a NameServer does, with fastjson into a HashMap<String,String>: a number
// or a boolean as its text, null as no value (""). Objects and arrays, and
// wrong types anywhere else, stay malformed. Only such headers come here, so
// the common path decodes once.
func lenientJSONHeader(b []byte) (jsonHeader, error) {
	var lh struct {
		jsonHeader
		ExtFields map[string]json.RawMessage `json:"extFields"` // shadows jsonHeader's
	}
	if err := json.Unmarshal(b, &lh); err != nil {
		return jsonHeader{}, err
	}
	h := lh.jsonHeader
	h.ExtFields = make(map[string]string, len(lh.ExtFields))
	for k, v := range lh.ExtFields {
		switch v[0] {
		case '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return jsonHeader{}, err
			}
			h.ExtFields[k] = s
		case 'n':
			h.ExtFields[k] = ""
		case '{', '[':
			return jsonHeader{}, fmt.Errorf("extFields %q: an object or array is not a string", k)
		default: // a number or a boolean, checked by the decoder
			h.ExtFields[k] = string(v)
		}
	}
	return h, nil
}

// binReader reads the ROCKETMQ header, bounds-checking every length.
type binReader struct {
	b   []byte
	err error
}

func (r *binReader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: ROCKETMQ header: %s of %d bytes, %d left", ErrMalformed, what, n, len(r.b))
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *binReader) u16(what string) uint16 {
	if b := r.take(2, what); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (r *binReader) u32(what string) uint32 {
	if b := r.take(4, what); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func decodeBinaryHeader(b []byte) (*Command, error) {
	r := &binReader{b: b}
	c := &Command{}
	c.Code = int16(r.u16("code"))
	if lang := r.take(1, "language"); lang != nil {
		c.Language = languageName(lang[0])
	}
	c.Version = int16(r.u16("version"))
	c.Opaque = int32(r.u32("opaque"))
	c.Flag = int32(r.u32("flag"))
	c.Remark = string(r.take(int(int32(r.u32("remark length"))), "remark"))
	ext := r.take(int(int32(r.u32("extFields length"))), "extFields")
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: ROCKETMQ header: %d bytes after extFields", ErrMalformed, len(r.b))
	}
	if len(ext) > 0 {
		er := &binReader{b: ext}
		c.ExtFields = map[string]string{}
		for len(er.b) > 0 && er.err == nil {
			k := er.take(int(int16(er.u16("key length"))), "key")
			v := er.take(int(int32(er.u32("value length"))), "value")
			if er.err == nil {
				c.ExtFields[string(k)] = string(v)
			}
		}
		if er.err != nil {
			return nil, er.err
		}
	}
	return c, nil
}

// AppendFrame appends c as one frame, length prefix included, with a header
// of c.SerializeType. The JSON header is written as RocketMQ's fastjson
// writes it: fields in alphabetical order, no whitespace, remark omitted when
// empty, extFields keys sorted, and "serializeTypeCurrentRPC":"JSON".
func (c *Command) AppendFrame(dst []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	switch c.SerializeType {
	case SerializeJSON:
		dst = c.appendJSONHeader(dst)
	case SerializeRocketMQ:
		for k := range c.ExtFields {
			if len(k) > math.MaxInt16 {
				return dst[:start], fmt.Errorf("remoting: extFields key of %d bytes does not fit the ROCKETMQ header", len(k))
			}
		}
		dst = c.appendBinaryHeader(dst)
	default:
		return dst[:start], fmt.Errorf("remoting: unknown serialize type %d", c.SerializeType)
	}
	headerLen := len(dst) - start - 8
	if headerLen > 0xFFFFFF {
		return dst[:start], fmt.Errorf("remoting: header of %d bytes exceeds 16 MiB", headerLen)
	}
	dst = append(dst, c.Body...)
	frameLen := len(dst) - start - 4
	if int64(frameLen) > math.MaxInt32 {
		return dst[:start], fmt.Errorf("remoting: frame of %d bytes is too large", frameLen)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(frameLen))
	binary.BigEndian.PutUint32(dst[start+4:], uint32(c.SerializeType)<<24|uint32(headerLen))
	return dst, nil
}

// Encode returns c as one frame.
func (c *Command) Encode() ([]byte, error) { return c.AppendFrame(nil) }

// WriteTo writes c as one frame with a single Write.
func (c *Command) WriteTo(w io.Writer) (int64, error) {
	frame, err := c.AppendFrame(nil)
	if err != nil {
		return 0, err
	}
	n, err := w.Write(frame)
	return int64(n), err
}

func (c *Command) language() string {
	if c.Language == "" {
		return DefaultLanguage
	}
	return c.Language
}

func (c *Command) appendJSONHeader(dst []byte) []byte {
	dst = append(dst, '{')
	dst = appendKey(dst, "code")
	dst = appendInt(dst, int64(c.Code))
	if c.ExtFields != nil {
		dst = append(dst, ',')
		dst = appendKey(dst, "extFields")
		dst = appendStringMap(dst, c.ExtFields, Legacy)
	}
	dst = append(dst, ',')
	dst = appendKey(dst, "flag")
	dst = appendInt(dst, int64(c.Flag))
	dst = append(dst, ',')
	dst = appendKey(dst, "language")
	dst = appendString(dst, c.language(), Legacy)
	dst = append(dst, ',')
	dst = appendKey(dst, "opaque")
	dst = appendInt(dst, int64(c.Opaque))
	if c.Remark != "" {
		dst = append(dst, ',')
		dst = appendKey(dst, "remark")
		dst = appendString(dst, c.Remark, Legacy)
	}
	dst = append(dst, `,"serializeTypeCurrentRPC":"JSON",`...)
	dst = appendKey(dst, "version")
	dst = appendInt(dst, int64(c.Version))
	return append(dst, '}')
}

func (c *Command) appendBinaryHeader(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(c.Code))
	dst = append(dst, languageCode(c.language()))
	dst = binary.BigEndian.AppendUint16(dst, uint16(c.Version))
	dst = binary.BigEndian.AppendUint32(dst, uint32(c.Opaque))
	dst = binary.BigEndian.AppendUint32(dst, uint32(c.Flag))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(c.Remark)))
	dst = append(dst, c.Remark...)
	lenAt := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	for _, k := range sortedKeys(c.ExtFields) {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(k)))
		dst = append(dst, k...)
		v := c.ExtFields[k]
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}
	binary.BigEndian.PutUint32(dst[lenAt:], uint32(len(dst)-lenAt-4))
	return dst
}

// TopicNotExistResponse is a 5.x NameServer's TOPIC_NOT_EXIST answer to a
// route request, remark included.
func TopicNotExistResponse(req *Command, topic string) *Command {
	return NewResponse(req, TopicNotExist, "No topic route info in name server for the topic: "+topic+
		"\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.")
}

// NotSupportedResponse is a 5.x NameServer's answer to a request code it
// does not handle (4.9 does not answer at all).
func NotSupportedResponse(req *Command) *Command {
	return NewResponse(req, RequestCodeNotSupported, fmt.Sprintf(" request type %d not supported", req.Code))
}
