package wire

import (
	"math"
	"unicode/utf8"
)

// Hand-written codecs for the broker session's hot messages: a broker
// re-sends its full registration (100 topics is 3 KB) whenever its data
// version changes, and heartbeats every few seconds. Reflection took about
// a third of a node's CPU per registration. Each encoder gives byte for
// byte what the reflective encoder gives (core deterministic: keys in
// order, shortest integers, empty optional fields left out, an absent list
// as an empty array); each decoder reads the shape those encoders produce
// and hands anything else to the general decoder, so the value and the
// error are the same as Frame.DecodeBody's, but for one thing: a topic
// name the node would refuse is refused while decoding, on either path,
// so that memory follows the valid bytes received (checkTopicNames).
// TestRegisterCodec, FuzzDecodeRegister and FuzzDecodeUpdateTopics
// compare both on the vectors and on mutations of them. AppendRequest and AppendResponse
// (request_encode.go) write the encoders' output straight into a frame.

// MarshalCBOR encodes r with AppendRegister: Marshal and NewRequest take
// it instead of reflection.
func (r Register) MarshalCBOR() ([]byte, error) {
	return AppendRegister(make([]byte, 0, registerSizeHint(&r)), &r), nil
}

// MarshalCBOR encodes a with AppendRegisterAck.
func (a RegisterAck) MarshalCBOR() ([]byte, error) {
	return AppendRegisterAck(make([]byte, 0, 64+len(a.MasterAddr)+len(a.MasterHAAddr)), &a), nil
}

// MarshalCBOR encodes a with AppendLeaseAck.
func (a LeaseAck) MarshalCBOR() ([]byte, error) {
	return AppendLeaseAck(make([]byte, 0, 48), &a), nil
}

// MarshalCBOR encodes h with AppendHeartbeat.
func (h Heartbeat) MarshalCBOR() ([]byte, error) {
	return AppendHeartbeat(make([]byte, 0, 48+len(h.Cluster)+len(h.Addr)), &h), nil
}

// registerSizeHint is the exact size of r's encoding (TestRegisterCodecEncode
// checks it), so that the buffer is allocated once and no larger: a
// generous bound cost as much as the encoding.
func registerSizeHint(r *Register) int {
	n := 1 + textSize(r.Cluster) + textSize(r.BrokerName) + 1 + intSize(r.BrokerID) + textSize(r.Addr) +
		1 + dataVersionSize(&r.DataVersion) + 1 + headSize(uint64(len(r.Topics)))
	if r.HAAddr != "" {
		n += textSize(r.HAAddr)
	}
	if r.Zone != "" {
		n += textSize(r.Zone)
	}
	if r.ActingMaster {
		n += 2
	}
	if r.HeartbeatTimeoutMs != 0 {
		n += 1 + headSize(r.HeartbeatTimeoutMs)
	}
	for i := range r.Topics {
		tc := &r.Topics[i]
		n += 1 + textSize(tc.Name)
		for _, v := range [...]uint32{tc.ReadQueues, tc.WriteQueues, uint32(tc.Perm), tc.SysFlag} {
			if v != 0 {
				n += 1 + headSize(uint64(v))
			}
		}
	}
	return n
}

// textSize is the size of a text string with its key.
func textSize(s string) int { return 1 + headSize(uint64(len(s))) + len(s) }

func intSize(v int64) int {
	if v < 0 {
		return headSize(uint64(-1 - v))
	}
	return headSize(uint64(v))
}

func dataVersionSize(v *DataVersion) int {
	n := 1
	if v.State != 0 {
		n += 1 + headSize(v.State)
	}
	if v.Timestamp != 0 {
		n += 1 + intSize(v.Timestamp)
	}
	if v.Counter != 0 {
		n += 1 + headSize(v.Counter)
	}
	return n
}

// headSize is the size of an item head with argument v.
func headSize(v uint64) int {
	switch {
	case v < 24:
		return 1
	case v <= 0xff:
		return 2
	case v <= 0xffff:
		return 3
	case v <= 0xffffffff:
		return 5
	}
	return 9
}

// AppendRegister appends the CBOR encoding of r to dst.
func AppendRegister(dst []byte, r *Register) []byte {
	pairs := byte(6) // cluster, broker name, broker id, address, data version, topics
	pairs += b2u(r.HAAddr != "") + b2u(r.Zone != "") + b2u(r.ActingMaster) + b2u(r.HeartbeatTimeoutMs != 0)
	dst = append(dst, 0xa0|pairs)
	dst = appendText(append(dst, 0x01), r.Cluster)
	dst = appendText(append(dst, 0x02), r.BrokerName)
	dst = appendInt(append(dst, 0x03), r.BrokerID)
	dst = appendText(append(dst, 0x04), r.Addr)
	if r.HAAddr != "" {
		dst = appendText(append(dst, 0x05), r.HAAddr)
	}
	if r.Zone != "" {
		dst = appendText(append(dst, 0x06), r.Zone)
	}
	if r.ActingMaster {
		dst = append(dst, 0x07, 0xf5)
	}
	dst = appendDataVersion(append(dst, 0x08), &r.DataVersion)
	dst = appendHead(append(dst, 0x09), 0x80, uint64(len(r.Topics)))
	for i := range r.Topics {
		dst = appendTopicConfig(dst, &r.Topics[i])
	}
	if r.HeartbeatTimeoutMs != 0 {
		dst = appendUint(append(dst, 0x0a), r.HeartbeatTimeoutMs)
	}
	return dst
}

// AppendRegisterAck appends the CBOR encoding of a to dst.
func AppendRegisterAck(dst []byte, a *RegisterAck) []byte {
	dst = append(dst, 0xa1+b2u(a.MasterAddr != "")+b2u(a.MasterHAAddr != ""), 0x01)
	dst = AppendLeaseAck(dst, &a.Lease)
	if a.MasterAddr != "" {
		dst = appendText(append(dst, 0x02), a.MasterAddr)
	}
	if a.MasterHAAddr != "" {
		dst = appendText(append(dst, 0x03), a.MasterHAAddr)
	}
	return dst
}

// AppendLeaseAck appends the CBOR encoding of a to dst.
func AppendLeaseAck(dst []byte, a *LeaseAck) []byte {
	dst = append(dst, 0xa2+b2u(a.VersionChanged)+b2u(a.HeartbeatIntervalMs != 0)+b2u(a.ThresholdMs != 0), 0x01)
	dst = appendUint(dst, a.Epoch)
	dst = appendInt(append(dst, 0x02), a.DeadlineMs)
	if a.VersionChanged {
		dst = append(dst, 0x03, 0xf5)
	}
	if a.HeartbeatIntervalMs != 0 {
		dst = appendUint(append(dst, 0x04), a.HeartbeatIntervalMs)
	}
	if a.ThresholdMs != 0 {
		dst = appendUint(append(dst, 0x05), a.ThresholdMs)
	}
	return dst
}

// AppendHeartbeat appends the CBOR encoding of h to dst.
func AppendHeartbeat(dst []byte, h *Heartbeat) []byte {
	dst = appendText(append(dst, 0xa4, 0x01), h.Cluster)
	dst = appendText(append(dst, 0x02), h.Addr)
	dst = appendUint(append(dst, 0x03), h.Epoch)
	return appendDataVersion(append(dst, 0x04), &h.DataVersion)
}

func appendDataVersion(dst []byte, v *DataVersion) []byte {
	dst = append(dst, 0xa0+b2u(v.State != 0)+b2u(v.Timestamp != 0)+b2u(v.Counter != 0))
	if v.State != 0 {
		dst = appendUint(append(dst, 0x01), v.State)
	}
	if v.Timestamp != 0 {
		dst = appendInt(append(dst, 0x02), v.Timestamp)
	}
	if v.Counter != 0 {
		dst = appendUint(append(dst, 0x03), v.Counter)
	}
	return dst
}

func appendTopicConfig(dst []byte, tc *TopicConfig) []byte {
	dst = append(dst, 0xa1+b2u(tc.ReadQueues != 0)+b2u(tc.WriteQueues != 0)+b2u(tc.Perm != 0)+b2u(tc.SysFlag != 0))
	dst = appendText(append(dst, 0x01), tc.Name)
	if tc.ReadQueues != 0 {
		dst = appendUint(append(dst, 0x02), uint64(tc.ReadQueues))
	}
	if tc.WriteQueues != 0 {
		dst = appendUint(append(dst, 0x03), uint64(tc.WriteQueues))
	}
	if tc.Perm != 0 {
		dst = appendUint(append(dst, 0x04), uint64(tc.Perm))
	}
	if tc.SysFlag != 0 {
		dst = appendUint(append(dst, 0x05), uint64(tc.SysFlag))
	}
	return dst
}

func appendText(dst []byte, s string) []byte {
	return append(appendHead(dst, 0x60, uint64(len(s))), s...)
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// DecodeRegister decodes a register request body into r, as
// Frame.DecodeBody does. The shape AppendRegister produces (known keys in
// ascending order, so none twice; definite lengths; every value of its
// field's type and range) is read by hand; anything else, including every
// input the general decoder refuses, goes to the general decoder.
//
// The topic names are substrings of one copy of the body's topics and what
// follows them (one allocation instead of one per topic), so a caller that keeps a name
// beyond the request keeps that copy alive: clone what you keep. The
// other fields are strings of their own.
//
// A topic without a valid name (wire.ValidTopicName) is refused where the
// decoder meets it, with the error the node gives such a name (code 1),
// on either path: otherwise a peer declaring MaxArrayElements nameless
// topics in a few bytes each made the node allocate 32 bytes a topic
// (the general decoder more) before its validation refused them.
func (f *Frame) DecodeRegister(r *Register) error {
	if len(f.Body) > 0 {
		ok, err := decodeRegisterFast(f.Body, r)
		if ok || err != nil {
			if err != nil {
				*r = Register{}
			}
			return err
		}
	}
	*r = Register{}
	if err := checkTopicNames(f.Body, 9, 0); err != nil {
		return err
	}
	return f.DecodeBody(r)
}

// DecodeHeartbeat decodes a heartbeat request body into h, as
// Frame.DecodeBody does, reading the shape AppendHeartbeat produces by
// hand and anything else with the general decoder.
func (f *Frame) DecodeHeartbeat(h *Heartbeat) error {
	if len(f.Body) > 0 && decodeHeartbeatFast(f.Body, h) {
		return nil
	}
	*h = Heartbeat{}
	return f.DecodeBody(h)
}

// DecodeUpdateTopics decodes an update-topics request body into u, as
// Frame.DecodeBody does, reading the shape the deterministic encoder
// produces by hand and anything else with the general decoder. The
// upserted topics' names share one copy of the body, as DecodeRegister's
// do; the removed names are strings of their own. An upserted topic
// without a valid name is refused while decoding, as DecodeRegister
// refuses one.
func (f *Frame) DecodeUpdateTopics(u *UpdateTopics) error {
	if len(f.Body) > 0 {
		ok, err := decodeUpdateTopicsFast(f.Body, u)
		if ok || err != nil {
			if err != nil {
				*u = UpdateTopics{}
			}
			return err
		}
	}
	*u = UpdateTopics{}
	if err := checkTopicNames(f.Body, 5, 6); err != nil {
		return err
	}
	return f.DecodeBody(u)
}

// keyedMap reads a map head and then its keys, each an unsigned integer
// above the one before and at most max: keys in ascending order cannot
// repeat, so no duplicate check is needed.
type keyedMap struct {
	pairs uint64
	last  uint64
	max   uint64
}

// open reads a map head of at most m.max pairs.
func (m *keyedMap) open(b []byte) ([]byte, bool) {
	major, pairs, b, err := head(b)
	if err != nil || major != 5 || pairs > m.max {
		return nil, false
	}
	m.pairs = pairs
	return b, true
}

// next reads the next key (m.pairs > 0), or reports false when it is not
// above the one before or not within 1..max.
func (m *keyedMap) next(b []byte) (uint64, []byte, bool) {
	if len(b) > 0 && b[0] < 24 { // every key of these messages: one byte
		key := uint64(b[0])
		if key <= m.last || key > m.max {
			return 0, nil, false
		}
		m.pairs--
		m.last = key
		return key, b[1:], true
	}
	major, key, b, err := head(b)
	if err != nil || major != 0 || key <= m.last || key > m.max {
		return 0, nil, false
	}
	m.pairs--
	m.last = key
	return key, b, true
}

// readText reads a definite-length, valid UTF-8 text string; it returns
// its bytes, aliasing b.
func readText(b []byte) ([]byte, []byte, bool) {
	if len(b) > 0 && b[0] >= 0x60 && b[0] < 0x78 { // up to 23 bytes: the head is one byte
		n := int(b[0] - 0x60)
		if n >= len(b) || !utf8.Valid(b[1:1+n]) {
			return nil, nil, false
		}
		return b[1 : 1+n], b[1+n:], true
	}
	major, n, b, err := head(b)
	if err != nil || major != 3 || n > uint64(len(b)) || !utf8.Valid(b[:n]) {
		return nil, nil, false
	}
	return b[:n], b[n:], true
}

// readString is readText as a string of its own.
func readString(b []byte) (string, []byte, bool) {
	s, b, ok := readText(b)
	return string(s), b, ok
}

// readUint reads an unsigned integer of at most max.
func readUint(b []byte, max uint64) (uint64, []byte, bool) {
	if len(b) > 0 && b[0] < 24 && uint64(b[0]) <= max {
		return uint64(b[0]), b[1:], true
	}
	major, v, b, err := head(b)
	if err != nil || major != 0 || v > max {
		return 0, nil, false
	}
	return v, b, true
}

// readInt64 reads an integer that fits int64.
func readInt64(b []byte) (int64, []byte, bool) {
	major, v, b, err := head(b)
	if err != nil || (major != 0 && major != 1) || v > math.MaxInt64 {
		return 0, nil, false
	}
	if major == 1 {
		return -1 - int64(v), b, true
	}
	return int64(v), b, true
}

// readBool reads true or false (simple values 21 and 20 in their one-byte
// form: the two-byte form of a simple value below 32 is not well-formed).
func readBool(b []byte) (bool, []byte, bool) {
	if len(b) == 0 || (b[0] != 0xf4 && b[0] != 0xf5) {
		return false, nil, false
	}
	return b[0] == 0xf5, b[1:], true
}

// decodeRegisterFast reports whether it decoded body into r, or the
// error of a topic without a valid name.
func decodeRegisterFast(body []byte, r *Register) (bool, error) {
	*r = Register{}
	m := keyedMap{max: 10}
	var err error
	b, ok := m.open(body)
	for ok && m.pairs > 0 {
		var key uint64
		if key, b, ok = m.next(b); !ok {
			break
		}
		switch key {
		case 1:
			r.Cluster, b, ok = readString(b)
		case 2:
			r.BrokerName, b, ok = readString(b)
		case 4:
			r.Addr, b, ok = readString(b)
		case 5:
			r.HAAddr, b, ok = readString(b)
		case 6:
			r.Zone, b, ok = readString(b)
		case 3:
			r.BrokerID, b, ok = readInt64(b)
		case 7:
			r.ActingMaster, b, ok = readBool(b)
		case 8:
			b, ok = decodeDataVersionFast(b, &r.DataVersion)
		case 9:
			if b, ok, err = decodeTopicsFast(b, &r.Topics); err != nil {
				return false, err
			}
		case 10:
			r.HeartbeatTimeoutMs, b, ok = readUint(b, math.MaxUint64)
		}
	}
	return ok && len(b) == 0, nil
}

func decodeDataVersionFast(b []byte, v *DataVersion) ([]byte, bool) {
	m := keyedMap{max: 3}
	b, ok := m.open(b)
	for ok && m.pairs > 0 {
		var key uint64
		if key, b, ok = m.next(b); !ok {
			break
		}
		switch key {
		case 1:
			v.State, b, ok = readUint(b, math.MaxUint64)
		case 2:
			v.Timestamp, b, ok = readInt64(b)
		case 3:
			v.Counter, b, ok = readUint(b, math.MaxUint64)
		}
	}
	return b, ok
}

// topicPreallocLen is the encoded size per topic decodeTopicsFast
// preallocates for: a broker's topic, a name of 7 bytes or more with its
// queue counts and permission, takes at least this much; shorter ones
// grow the slice. At 32 bytes a TopicConfig, the slice preallocated is
// at most twice the bytes received, whatever count a peer declares.
const topicPreallocLen = 16

// decodeTopicsFast reads an array of TopicConfig maps. The names share one
// string copy of the rest of the body (the topics are its last field but
// one, so little else is copied). A topic without a valid name ends the
// decoding with the error the node gives it (invalidTopicName), so the
// slice only grows with topics the node could accept.
func decodeTopicsFast(b []byte, topics *[]TopicConfig) ([]byte, bool, error) {
	major, n, b, err := head(b)
	// Each element takes at least 3 bytes (a1 01 60): a bound before
	// allocating, as the general decoder has MaxArrayElements.
	if err != nil || major != 4 || n > MaxArrayElements || n > uint64(len(b))/3 {
		return nil, false, nil
	}
	src := string(b)
	out := make([]TopicConfig, 0, min(n, uint64(len(b))/topicPreallocLen))
	ok := true
	for range n {
		var tc TopicConfig
		if b, ok = decodeTopicConfigFast(b, src[len(src)-len(b):], &tc); !ok {
			break
		}
		if !validTopicName(tc.Name) {
			return nil, false, invalidTopicName(tc.Name)
		}
		out = append(out, tc)
	}
	*topics = out
	return b, ok, nil
}

// topicNameByte marks the bytes ValidTopicName allows.
var topicNameByte = func() (ok [256]bool) {
	for c := range ok {
		ok[c] = topicChar(byte(c))
	}
	return ok
}()

// validTopicName is ValidTopicName's verdict without its error, by table:
// the decoders check every topic of every registration.
func validTopicName[T string | []byte](name T) bool {
	if len(name) == 0 || len(name) > TopicNameLimit(name) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !topicNameByte[name[i]] && (name[i] != popRetrySeparatorV2 || !hasPrefix(name, retryTopicPrefix)) {
			return false
		}
	}
	return true
}

// invalidTopicName is the error the node answers an invalid topic name
// in a register or update-topics with, code and text: its registry wraps
// ValidTopicName's error in "invalid argument".
func invalidTopicName(name string) error {
	return Errorf(CodeBadRequest, "invalid argument: %v", ValidTopicName(name))
}

// checkTopicNames is for the register and update-topics bodies the fast
// decoders decline: the general decoder allocates a topics array's
// declared length before it decodes an element, about 100 bytes for a
// one-byte element, so the topics array (the value of top-level key
// topicsKey) and the array of names (namesKey, when not 0) are walked
// first and a topic or name that is not a valid topic name refused as the
// fast path refuses it. It leaves a malformed body to the general
// decoder, which refuses it before allocating.
func checkTopicNames(body []byte, topicsKey, namesKey uint64) error {
	major, pairs, b, err := head(body)
	if err != nil || major != 5 {
		return nil
	}
	for range pairs {
		if major, k, rest, err := head(b); err == nil && major == 0 && (k == topicsKey || k == namesKey && k != 0) {
			if err := checkTopicArray(rest, k == namesKey); err != nil {
				return err
			}
		}
		if b, err = (walker{}).item(b, 1); err != nil {
			return nil
		}
		if b, err = (walker{}).item(b, 1); err != nil {
			return nil
		}
	}
	return nil
}

// checkTopicArray is checkTopicNames for the array at b's start: of
// TopicConfig maps, or with names set of topic names.
func checkTopicArray(b []byte, names bool) error {
	major, n, b, err := head(b)
	if err != nil || major != 4 {
		return nil
	}
	for range n {
		elem := b
		if b, err = (walker{}).item(b, 2); err != nil {
			return nil
		}
		elem = elem[:len(elem)-len(b)]
		var name []byte
		if names {
			if major, n, v, err := head(elem); err == nil && major == 3 && n == uint64(len(v)) {
				name = v
			}
		} else {
			name = topicName(elem)
		}
		if !validTopicName(name) {
			return invalidTopicName(string(name))
		}
	}
	return nil
}

// topicName is the name of the TopicConfig map elem (a well-formed item):
// the text under key 1 (or text key "1", which some decoders take for the
// same field), or nil when there is none.
func topicName(elem []byte) []byte {
	major, pairs, b, err := head(elem)
	if err != nil || major != 5 {
		return nil
	}
	for range pairs {
		kmajor, k, rest, err := head(b)
		if err != nil {
			return nil
		}
		if (kmajor == 0 && k == 1) || (kmajor == 3 && k == 1 && len(rest) > 0 && rest[0] == '1') {
			if kmajor == 3 {
				rest = rest[1:]
			}
			if vmajor, n, v, err := head(rest); err == nil && vmajor == 3 && n <= uint64(len(v)) {
				return v[:n]
			}
			return nil
		}
		if b, err = (walker{}).item(b, 2); err != nil {
			return nil
		}
		if b, err = (walker{}).item(b, 2); err != nil {
			return nil
		}
	}
	return nil
}

// decodeTopicConfigFast decodes one TopicConfig from b into tc; src holds
// b's bytes as a string, where the name is taken from.
func decodeTopicConfigFast(b []byte, src string, tc *TopicConfig) ([]byte, bool) {
	start := len(b)
	m := keyedMap{max: 5}
	b, ok := m.open(b)
	for ok && m.pairs > 0 {
		var key, v uint64
		if key, b, ok = m.next(b); !ok {
			break
		}
		switch key {
		case 1:
			var name []byte
			if name, b, ok = readText(b); ok {
				at := start - len(b) - len(name)
				tc.Name = src[at : at+len(name)]
			}
		case 2:
			v, b, ok = readUint(b, math.MaxUint32)
			tc.ReadQueues = uint32(v)
		case 3:
			v, b, ok = readUint(b, math.MaxUint32)
			tc.WriteQueues = uint32(v)
		case 4:
			v, b, ok = readUint(b, math.MaxUint8)
			tc.Perm = uint8(v)
		case 5:
			v, b, ok = readUint(b, math.MaxUint32)
			tc.SysFlag = uint32(v)
		}
	}
	return b, ok
}

func decodeHeartbeatFast(body []byte, h *Heartbeat) bool {
	*h = Heartbeat{}
	m := keyedMap{max: 4}
	b, ok := m.open(body)
	for ok && m.pairs > 0 {
		var key uint64
		if key, b, ok = m.next(b); !ok {
			break
		}
		switch key {
		case 1:
			h.Cluster, b, ok = readString(b)
		case 2:
			h.Addr, b, ok = readString(b)
		case 3:
			h.Epoch, b, ok = readUint(b, math.MaxUint64)
		case 4:
			b, ok = decodeDataVersionFast(b, &h.DataVersion)
		}
	}
	return ok && len(b) == 0
}

func decodeUpdateTopicsFast(body []byte, u *UpdateTopics) (bool, error) {
	*u = UpdateTopics{}
	m := keyedMap{max: 6}
	var err error
	b, ok := m.open(body)
	for ok && m.pairs > 0 {
		var key uint64
		if key, b, ok = m.next(b); !ok {
			break
		}
		switch key {
		case 1:
			u.Cluster, b, ok = readString(b)
		case 2:
			u.Addr, b, ok = readString(b)
		case 3:
			u.Epoch, b, ok = readUint(b, math.MaxUint64)
		case 4:
			b, ok = decodeDataVersionFast(b, &u.DataVersion)
		case 5:
			if b, ok, err = decodeTopicsFast(b, &u.Upsert); err != nil {
				return false, err
			}
		case 6:
			if b, ok, err = decodeTopicNamesFast(b, &u.Remove); err != nil {
				return false, err
			}
		}
	}
	return ok && len(b) == 0, nil
}

// decodeTopicNamesFast reads an array of text strings, each a string of
// its own, refusing the first that is not a valid topic name as
// decodeTopicsFast does. The slice is preallocated for at most one name
// per 8 bytes received (twice those bytes) and grows with what is decoded.
func decodeTopicNamesFast(b []byte, out *[]string) ([]byte, bool, error) {
	major, n, b, err := head(b)
	// Each element takes at least one byte: a bound before allocating.
	if err != nil || major != 4 || n > MaxArrayElements || n > uint64(len(b)) {
		return nil, false, nil
	}
	ss := make([]string, 0, min(n, uint64(len(b))/8))
	ok := true
	for range n {
		var name []byte
		if name, b, ok = readText(b); !ok {
			break
		}
		if !validTopicName(name) {
			return nil, false, invalidTopicName(string(name))
		}
		ss = append(ss, string(name))
	}
	*out = ss
	return b, ok, nil
}

// MarshalBody is Marshal for a message body, taking the hand-written
// encoders of this file directly: through Marshal, a MarshalCBOR result is
// copied and checked for well-formedness once more, which costs a 3 KB
// registration as much as encoding it. NewRequest uses it; AppendRequest
// and AppendResponse encode the same bytes straight into a frame
// (appendBody).
func MarshalBody(v any) ([]byte, error) {
	switch m := v.(type) {
	case *Register:
		if m != nil {
			return AppendRegister(make([]byte, 0, registerSizeHint(m)), m), nil
		}
	case *Heartbeat:
		if m != nil {
			return AppendHeartbeat(make([]byte, 0, 48+len(m.Cluster)+len(m.Addr)), m), nil
		}
	case LeaseAck:
		return AppendLeaseAck(make([]byte, 0, 48), &m), nil
	case RegisterAck:
		return AppendRegisterAck(make([]byte, 0, 64+len(m.MasterAddr)+len(m.MasterHAAddr)), &m), nil
	}
	return Marshal(v) // a nil pointer is null, as before
}
