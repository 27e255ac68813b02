package remoting

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
)

// TopicConfig is one topic of a broker's topic table (TopicConfig.java).
type TopicConfig struct {
	TopicName       string            `json:"topicName"`
	ReadQueueNums   int32             `json:"readQueueNums"`
	WriteQueueNums  int32             `json:"writeQueueNums"`
	Perm            int32             `json:"perm"`
	TopicFilterType string            `json:"topicFilterType"`
	TopicSysFlag    int32             `json:"topicSysFlag"`
	Order           bool              `json:"order"`
	Attributes      map[string]string `json:"attributes"`
}

// UnmarshalJSON applies TopicConfig.java's defaults (16 queues, read-write,
// SINGLE_TAG) to fields the JSON omits, as fastjson does.
func (t *TopicConfig) UnmarshalJSON(b []byte) error {
	type plain TopicConfig
	p := plain{ReadQueueNums: 16, WriteQueueNums: 16, Perm: PermRead | PermWrite, TopicFilterType: "SINGLE_TAG"}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*t = TopicConfig(p)
	return nil
}

func (t *TopicConfig) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"attributes":`...)
	dst = appendStringMap(dst, t.Attributes, Legacy)
	dst = append(dst, `,"order":`...)
	dst = appendBool(dst, t.Order)
	dst = append(dst, `,"perm":`...)
	dst = appendInt(dst, int64(t.Perm))
	dst = append(dst, `,"readQueueNums":`...)
	dst = appendInt(dst, int64(t.ReadQueueNums))
	dst = append(dst, `,"topicFilterType":`...)
	dst = appendString(dst, t.filterType(), Legacy)
	dst = append(dst, `,"topicName":`...)
	dst = appendString(dst, t.TopicName, Legacy)
	dst = append(dst, `,"topicSysFlag":`...)
	dst = appendInt(dst, int64(t.TopicSysFlag))
	dst = append(dst, `,"writeQueueNums":`...)
	dst = appendInt(dst, int64(t.WriteQueueNums))
	return append(dst, '}')
}

func (t *TopicConfig) filterType() string {
	if t.TopicFilterType == "" {
		return "SINGLE_TAG"
	}
	return t.TopicFilterType
}

// encodeLine is TopicConfig.encode() of 5.x: "name read write perm
// filterType attributesJSON". It carries no topicSysFlag or order.
func (t *TopicConfig) encodeLine() []byte {
	b := []byte(t.TopicName)
	for _, n := range []int32{t.ReadQueueNums, t.WriteQueueNums, t.Perm} {
		b = append(b, ' ')
		b = appendInt(b, int64(n))
	}
	b = append(b, ' ')
	b = append(b, t.filterType()...)
	b = append(b, ' ')
	return appendStringMap(b, t.Attributes, Legacy)
}

// decodeTopicConfigLine reads TopicConfig.encode() of 4.9 (5 fields) or 5.x
// (a sixth: attributes as JSON).
func decodeTopicConfigLine(s string) (TopicConfig, error) {
	f := strings.SplitN(s, " ", 6)
	if len(f) < 5 {
		return TopicConfig{}, fmt.Errorf("%w: compressed topic config %q has %d fields", ErrMalformed, s, len(f))
	}
	// Copies, not substrings of s: a line may carry megabytes of attributes
	// (a few KiB once compressed), which a kept name would keep alive.
	t := TopicConfig{TopicName: strings.Clone(f[0]), TopicFilterType: strings.Clone(f[4])}
	for i, p := range []*int32{&t.ReadQueueNums, &t.WriteQueueNums, &t.Perm} {
		n, err := strconv.ParseInt(f[i+1], 10, 32)
		if err != nil {
			return TopicConfig{}, fmt.Errorf("%w: compressed topic config %q: %v", ErrMalformed, s, err)
		}
		*p = int32(n)
	}
	if len(f) == 6 && f[5] != "" {
		if err := json.Unmarshal([]byte(f[5]), &t.Attributes); err != nil {
			return TopicConfig{}, fmt.Errorf("%w: compressed topic config %q attributes: %v", ErrMalformed, s, err)
		}
	}
	return t, nil
}

// RegisterBrokerBody is the body of REGISTER_BROKER: the broker's topic table
// and data version (RegisterBrokerBody with its
// TopicConfigAndMappingSerializeWrapper).
type RegisterBrokerBody struct {
	DataVersion        DataVersion
	MappingDataVersion DataVersion
	// TopicConfigTable is keyed by topic name. A registration may hold only
	// some of the broker's topics (REMOTING.md §3.1): readers upsert.
	TopicConfigTable map[string]TopicConfig
	FilterServerList []string
	// Static-topic data (5.x), kept raw; edgereg does not serve static topics.
	TopicQueueMappingInfoMap   map[string]json.RawMessage
	TopicQueueMappingDetailMap map[string]json.RawMessage
}

type registerBodyJSON struct {
	FilterServerList            []string `json:"filterServerList"`
	TopicConfigSerializeWrapper *struct {
		DataVersion                DataVersion                `json:"dataVersion"`
		MappingDataVersion         DataVersion                `json:"mappingDataVersion"`
		TopicConfigTable           map[string]TopicConfig     `json:"topicConfigTable"`
		TopicQueueMappingInfoMap   map[string]json.RawMessage `json:"topicQueueMappingInfoMap"`
		TopicQueueMappingDetailMap map[string]json.RawMessage `json:"topicQueueMappingDetailMap"`
	} `json:"topicConfigSerializeWrapper"`
}

// EncodeJSON returns b as the uncompressed body; topics are written in name
// order (Java writes hash order, which no reader depends on).
func (b *RegisterBrokerBody) EncodeJSON() []byte {
	dst := []byte(`{"filterServerList":`)
	dst = appendStrings(dst, b.FilterServerList, Legacy)
	dst = append(dst, `,"topicConfigSerializeWrapper":{"dataVersion":`...)
	dst = b.DataVersion.AppendJSON(dst)
	dst = append(dst, `,"mappingDataVersion":`...)
	dst = b.MappingDataVersion.AppendJSON(dst)
	dst = append(dst, `,"topicConfigTable":{`...)
	for i, name := range sortedKeys(b.TopicConfigTable) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, name, Legacy)
		dst = append(dst, ':')
		tc := b.TopicConfigTable[name]
		dst = tc.appendJSON(dst)
	}
	dst = append(dst, `},"topicQueueMappingDetailMap":`...)
	dst = appendRawMap(dst, b.TopicQueueMappingDetailMap)
	dst = append(dst, `,"topicQueueMappingInfoMap":`...)
	dst = appendRawMap(dst, b.TopicQueueMappingInfoMap)
	return append(dst, '}', '}')
}

func appendRawMap(dst []byte, m map[string]json.RawMessage) []byte {
	dst = append(dst, '{')
	for i, k := range sortedKeys(m) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, k, Legacy)
		dst = append(dst, ':')
		dst = append(dst, m[k]...)
	}
	return append(dst, '}')
}

// EncodeCompressed returns b as RegisterBrokerBody.encode(true) of 5.x: a
// zlib stream of length-prefixed parts (REMOTING.md §3.1). TopicConfig lines
// carry no topicSysFlag or order, so those are lost, as in RocketMQ.
func (b *RegisterBrokerBody) EncodeCompressed() []byte {
	var raw []byte
	part := func(p []byte) {
		raw = binary.BigEndian.AppendUint32(raw, uint32(len(p)))
		raw = append(raw, p...)
	}
	part(b.DataVersion.AppendJSON(nil))
	raw = binary.BigEndian.AppendUint32(raw, uint32(len(b.TopicConfigTable)))
	for _, name := range sortedKeys(b.TopicConfigTable) {
		tc := b.TopicConfigTable[name]
		part(tc.encodeLine())
	}
	part(appendStrings(nil, b.FilterServerList, Legacy))
	raw = binary.BigEndian.AppendUint32(raw, uint32(len(b.TopicQueueMappingInfoMap)))
	for _, k := range sortedKeys(b.TopicQueueMappingInfoMap) {
		part(b.TopicQueueMappingInfoMap[k])
	}
	var out bytes.Buffer
	w, _ := zlib.NewWriterLevel(&out, zlib.BestCompression) // the level is valid
	w.Write(raw)                                            // a bytes.Buffer does not fail
	w.Close()
	return out.Bytes()
}

// DecodeRegisterBrokerBody decodes a REGISTER_BROKER body, compressed
// (the header's compressed=true) or JSON. maxInflated caps the decompressed
// size of a compressed body (0: DefaultMaxFrame), so a small zlib bomb
// cannot grow without bound; memory follows bytes inflated, never a length
// the body declares.
func DecodeRegisterBrokerBody(body []byte, compressed bool, maxInflated int) (*RegisterBrokerBody, error) {
	if compressed {
		return decodeCompressedRegister(body, maxInflated)
	}
	var j registerBodyJSON
	if err := decodeFastjson(body, &j, "RegisterBrokerBody"); err != nil {
		return nil, err
	}
	w := j.TopicConfigSerializeWrapper
	if w == nil {
		return nil, fmt.Errorf("%w: RegisterBrokerBody without topicConfigSerializeWrapper", ErrMalformed)
	}
	b := &RegisterBrokerBody{DataVersion: w.DataVersion, MappingDataVersion: w.MappingDataVersion,
		TopicConfigTable: map[string]TopicConfig{}, FilterServerList: j.FilterServerList,
		TopicQueueMappingInfoMap: w.TopicQueueMappingInfoMap, TopicQueueMappingDetailMap: w.TopicQueueMappingDetailMap}
	for key, tc := range w.TopicConfigTable {
		if tc.TopicName == "" {
			tc.TopicName = key
		}
		b.TopicConfigTable[tc.TopicName] = tc
	}
	return b, nil
}

// errInflatedTooLarge is returned by capReader past its cap.
var errInflatedTooLarge = errors.New("decompressed body exceeds the cap")

type capReader struct {
	r    io.Reader
	left int
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// Tell a clean end from an overflow: one more byte means overflow.
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			return 0, errInflatedTooLarge
		}
		return 0, io.EOF
	}
	if len(p) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= n
	return n, err
}

func decodeCompressedRegister(body []byte, maxInflated int) (*RegisterBrokerBody, error) {
	if maxInflated <= 0 {
		maxInflated = DefaultMaxFrame
	}
	zr, err := zlib.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: compressed RegisterBrokerBody: %v", ErrMalformed, err)
	}
	defer zr.Close()
	r := &capReader{r: zr, left: maxInflated}
	fail := func(what string, err error) error {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%w: compressed RegisterBrokerBody: %s: %v", ErrMalformed, what, err)
	}
	readInt := func() (int, error) {
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, err
		}
		n := int32(binary.BigEndian.Uint32(b[:]))
		if n < 0 {
			return 0, fmt.Errorf("negative length %d", n)
		}
		return int(n), nil
	}
	readPart := func() ([]byte, error) {
		n, err := readInt()
		if err != nil {
			return nil, err
		}
		return readGrowing(r, n)
	}
	b := &RegisterBrokerBody{TopicConfigTable: map[string]TopicConfig{}}
	p, err := readPart()
	if err != nil {
		return nil, fail("data version", err)
	}
	if b.DataVersion, err = DecodeDataVersion(p); err != nil {
		return nil, err
	}
	n, err := readInt()
	if err != nil {
		return nil, fail("topic count", err)
	}
	for i := range n {
		p, err := readPart()
		if err != nil {
			return nil, fail(fmt.Sprintf("topic config %d of %d", i+1, n), err)
		}
		tc, err := decodeTopicConfigLine(string(p))
		if err != nil {
			return nil, err
		}
		b.TopicConfigTable[tc.TopicName] = tc
	}
	if p, err = readPart(); err != nil {
		return nil, fail("filter server list", err)
	}
	if err := json.Unmarshal(p, &b.FilterServerList); err != nil {
		return nil, fmt.Errorf("%w: compressed RegisterBrokerBody filter server list: %v", ErrMalformed, err)
	}
	// 5.x always writes the static-topic mapping count; 4.9 bodies end here.
	var cnt [4]byte
	switch _, err := io.ReadFull(r, cnt[:]); {
	case errors.Is(err, io.EOF):
		return b, nil
	case err != nil:
		return nil, fail("mapping count", err)
	}
	m := int(int32(binary.BigEndian.Uint32(cnt[:])))
	if m < 0 {
		return nil, fail("mapping count", fmt.Errorf("negative count %d", m))
	}
	for i := range m {
		p, err := readPart()
		if err != nil {
			return nil, fail(fmt.Sprintf("mapping %d of %d", i+1, m), err)
		}
		var info struct {
			Topic string `json:"topic"`
		}
		if err := decodeFastjson(p, &info, "compressed RegisterBrokerBody mapping"); err != nil {
			return nil, err
		}
		if b.TopicQueueMappingInfoMap == nil {
			b.TopicQueueMappingInfoMap = map[string]json.RawMessage{}
		}
		b.TopicQueueMappingInfoMap[info.Topic] = p
	}
	return b, nil
}

// BodyCRC32 is RocketMQ's UtilAll.crc32: CRC-32 (IEEE) & 0x7FFFFFFF, the
// value REGISTER_BROKER carries as bodyCrc32.
func BodyCRC32(body []byte) int32 { return int32(crc32.ChecksumIEEE(body) & 0x7FFFFFFF) }
