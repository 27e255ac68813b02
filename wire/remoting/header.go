package remoting

import (
	"fmt"
	"strconv"
	"time"
)

// Typed views of the extFields RocketMQ's header classes carry. Parsing is
// lenient as Java's is (unknown keys ignored, absent optional fields zero);
// fields a NameServer needs are required.

// RegisterBrokerHeader is RegisterBrokerRequestHeader (REGISTER_BROKER).
type RegisterBrokerHeader struct {
	BrokerName   string
	BrokerAddr   string
	ClusterName  string
	HAServerAddr string
	BrokerID     int64
	Compressed   bool
	// BodyCRC32 is checked against BodyCRC32(body) when non-zero.
	BodyCRC32          int32
	EnableActingMaster bool
	// HeartbeatTimeout is heartbeatTimeoutMillis; zero when absent.
	HeartbeatTimeout time.Duration
	// ZoneName is __ZONE_NAME, set by DynamicalExtFieldRPCHook.
	ZoneName string
}

// ParseRegisterBrokerHeader reads a REGISTER_BROKER request's extFields.
func ParseRegisterBrokerHeader(ext map[string]string) (RegisterBrokerHeader, error) {
	p := extParser{ext: ext}
	h := RegisterBrokerHeader{
		BrokerName:         p.required("brokerName"),
		BrokerAddr:         p.required("brokerAddr"),
		ClusterName:        p.required("clusterName"),
		HAServerAddr:       ext["haServerAddr"],
		BrokerID:           p.int("brokerId", true),
		Compressed:         p.bool("compressed"),
		BodyCRC32:          int32(p.int("bodyCrc32", false)),
		EnableActingMaster: p.bool("enableActingMaster"),
		HeartbeatTimeout:   time.Duration(p.int("heartbeatTimeoutMillis", false)) * time.Millisecond,
		ZoneName:           ext["__ZONE_NAME"],
	}
	return h, p.err
}

// Ext returns h as extFields, as a broker sends them.
func (h RegisterBrokerHeader) Ext() map[string]string {
	ext := map[string]string{
		"brokerName": h.BrokerName, "brokerAddr": h.BrokerAddr, "clusterName": h.ClusterName,
		"haServerAddr": h.HAServerAddr, "brokerId": strconv.FormatInt(h.BrokerID, 10),
		"compressed": strconv.FormatBool(h.Compressed), "bodyCrc32": strconv.FormatInt(int64(h.BodyCRC32), 10),
		"enableActingMaster": strconv.FormatBool(h.EnableActingMaster),
	}
	if h.HeartbeatTimeout > 0 {
		ext["heartbeatTimeoutMillis"] = strconv.FormatInt(h.HeartbeatTimeout.Milliseconds(), 10)
	}
	if h.ZoneName != "" {
		ext["__ZONE_NAME"] = h.ZoneName
	}
	return ext
}

// BrokerHeader names one broker: the extFields of UNREGISTER_BROKER,
// QUERY_DATA_VERSION and BROKER_HEARTBEAT (whose brokerId is optional).
type BrokerHeader struct {
	BrokerName  string
	BrokerAddr  string
	ClusterName string
	BrokerID    int64
	// HeartbeatTimeout is BROKER_HEARTBEAT's heartbeatTimeoutMills; zero
	// when absent.
	HeartbeatTimeout time.Duration
}

// ParseBrokerHeader reads a broker-naming request's extFields; brokerName,
// brokerAddr and clusterName are required, brokerId is not (5.x heartbeats
// omit it).
func ParseBrokerHeader(ext map[string]string) (BrokerHeader, error) {
	p := extParser{ext: ext}
	h := BrokerHeader{
		BrokerName:       p.required("brokerName"),
		BrokerAddr:       p.required("brokerAddr"),
		ClusterName:      p.required("clusterName"),
		BrokerID:         p.int("brokerId", false),
		HeartbeatTimeout: time.Duration(p.int("heartbeatTimeoutMills", false)) * time.Millisecond,
	}
	return h, p.err
}

// Ext returns h as extFields.
func (h BrokerHeader) Ext() map[string]string {
	return map[string]string{"brokerName": h.BrokerName, "brokerAddr": h.BrokerAddr,
		"clusterName": h.ClusterName, "brokerId": strconv.FormatInt(h.BrokerID, 10)}
}

// RequiredExt returns the named extFields entry or an error that names it.
func RequiredExt(ext map[string]string, key string) (string, error) {
	p := extParser{ext: ext}
	v := p.required(key)
	return v, p.err
}

type extParser struct {
	ext map[string]string
	err error
}

func (p *extParser) fail(format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf(format, args...)
	}
}

func (p *extParser) required(key string) string {
	v := p.ext[key]
	if v == "" {
		p.fail("the request header field %s is null", key)
	}
	return v
}

func (p *extParser) int(key string, required bool) int64 {
	v, ok := p.ext[key]
	if !ok || v == "" {
		if required {
			p.fail("the request header field %s is null", key)
		}
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		p.fail("the request header field %s=%q is not a number", key, v)
	}
	return n
}

// bool reads a Java Boolean.parseBoolean: "true" in any case is true,
// anything else false.
func (p *extParser) bool(key string) bool {
	v := p.ext[key]
	return len(v) == 4 && (v[0]|0x20) == 't' && (v[1]|0x20) == 'r' && (v[2]|0x20) == 'u' && (v[3]|0x20) == 'e'
}
