package wire

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Permission bits of a topic's queues on one broker group, as in RocketMQ's PermName.
const (
	PermPriority uint8 = 8
	PermRead     uint8 = 4
	PermWrite    uint8 = 2
	PermInherit  uint8 = 1
)

// Topic system flags, as in RocketMQ's TopicSysFlag.
const (
	SysFlagUnit    uint32 = 1 << 0
	SysFlagUnitSub uint32 = 1 << 1
)

// MasterID is the broker id of a broker group's master; slaves have ids above it.
const MasterID int64 = 0

// TopicConfig is one topic as a broker holds it.
type TopicConfig struct {
	Name        string `cbor:"1,keyasint"`
	ReadQueues  uint32 `cbor:"2,keyasint,omitempty"`
	WriteQueues uint32 `cbor:"3,keyasint,omitempty"`
	Perm        uint8  `cbor:"4,keyasint,omitempty"`
	SysFlag     uint32 `cbor:"5,keyasint,omitempty"`
}

// DataVersion identifies one state of a broker's topic configuration. A broker
// bumps it whenever its topics change; a node compares it on every heartbeat to
// tell the broker whether to re-send its full configuration.
type DataVersion struct {
	// State orders configurations across a broker's restarts; a registration
	// whose State is lower than the one already held for the same broker id at
	// another address is refused (RocketMQ's stateVersion).
	State     uint64 `cbor:"1,keyasint,omitempty"`
	Timestamp int64  `cbor:"2,keyasint,omitempty"`
	Counter   uint64 `cbor:"3,keyasint,omitempty"`
}

// QueueData is the part of a route that one broker group holds.
type QueueData struct {
	BrokerName  string `cbor:"1,keyasint"`
	ReadQueues  uint32 `cbor:"2,keyasint,omitempty"`
	WriteQueues uint32 `cbor:"3,keyasint,omitempty"`
	Perm        uint8  `cbor:"4,keyasint,omitempty"`
	SysFlag     uint32 `cbor:"5,keyasint,omitempty"`
}

// BrokerData describes one broker group: its cluster, name, zone and the
// address of each member by broker id (MasterID is the master).
type BrokerData struct {
	Cluster string           `cbor:"1,keyasint"`
	Name    string           `cbor:"2,keyasint"`
	Zone    string           `cbor:"3,keyasint,omitempty"`
	Addrs   map[int64]string `cbor:"4,keyasint"`
}

// Route is where a topic lives: the queues of each broker group that holds it,
// joined with those groups' broker data. Both lists are sorted by broker name,
// so a route always encodes to the same bytes.
type Route struct {
	Queues  []QueueData  `cbor:"1,keyasint"`
	Brokers []BrokerData `cbor:"2,keyasint"`
}

// ClusterInfo is the registry's view of every cluster: which broker groups
// each cluster has, and each group's broker data.
type ClusterInfo struct {
	// Clusters maps a cluster name to the sorted names of its broker groups.
	Clusters map[string][]string `cbor:"1,keyasint"`
	// Groups maps a broker group name to its broker data.
	Groups map[string]BrokerData `cbor:"2,keyasint"`
}

// LowestBrokerAddr is the lowest address of any registered broker, or ""
// when there is none: the one address RocketMQ's system topic list names,
// chosen the same way on every call.
func (ci ClusterInfo) LowestBrokerAddr() string {
	best := ""
	for _, g := range ci.Groups {
		for _, a := range g.Addrs {
			if best == "" || a < best {
				best = a
			}
		}
	}
	return best
}

// RouteVersion is the version of a route's encoded bytes (PROTOCOL.md
// section 9): the first 8 bytes of their SHA-256, big-endian, never 0. A
// client that builds a route from several nodes' answers versions it the
// same way, so a node whose route is equal answers "not modified".
func RouteVersion(body []byte) uint64 {
	sum := sha256.Sum256(body)
	if v := binary.BigEndian.Uint64(sum[:8]); v != 0 {
		return v
	}
	return 1
}

// PermString shows permission bits as RocketMQ users read them: "rw-" for
// read and write, "r--" for read only, "--i" for inherit.
func PermString(p uint8) string {
	s := []byte("---")
	if p&PermRead != 0 {
		s[0] = 'r'
	}
	if p&PermWrite != 0 {
		s[1] = 'w'
	}
	if p&PermInherit != 0 {
		s[2] = 'i'
	}
	return string(s)
}

// MaxTopicNameLen is the longest topic name, as RocketMQ's TopicValidator
// allows.
const MaxTopicNameLen = 127

// MaxGroupTopicNameLen is the longest name of a topic a RocketMQ broker
// creates for a consumer group and registers like any other: %RETRY%<group>
// and %DLQ%<group>, of a group of up to 255 characters (RocketMQ's
// Validators), and 5.x pop consumers' %RETRY%<group>_<topic>. The
// TopicValidator's 127 characters do not apply to them.
const MaxGroupTopicNameLen = len(retryTopicPrefix) + 255 + 1 + MaxTopicNameLen

// Prefixes of the topics RocketMQ brokers create for consumer groups
// (MixAll.RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX).
const (
	retryTopicPrefix = "%RETRY%"
	dlqTopicPrefix   = "%DLQ%"
)

// TopicNameLimit is the longest a topic name may be: MaxGroupTopicNameLen
// for a consumer group's retry or dead-letter topic, MaxTopicNameLen for
// any other.
func TopicNameLimit[T string | []byte](name T) int {
	if hasPrefix(name, retryTopicPrefix) || hasPrefix(name, dlqTopicPrefix) {
		return MaxGroupTopicNameLen
	}
	return MaxTopicNameLen
}

func hasPrefix[T string | []byte](s T, prefix string) bool {
	return len(s) >= len(prefix) && string(s[:len(prefix)]) == prefix
}

// ErrInvalidTopicName is wrapped by ValidTopicName's errors.
var ErrInvalidTopicName = errors.New("invalid topic name")

// ValidTopicName reports why a topic name is invalid, or nil. Names are 1 to
// 127 characters of A-Z a-z 0-9 _ - % |, as RocketMQ's TopicValidator
// requires (a consumer group's retry or dead-letter topic up to
// MaxGroupTopicNameLen, and a retry topic may hold '+', as a 5.x pop
// consumer's %RETRY%<group>+<topic> does); nodes refuse anything else, so
// clients can check first.
func ValidTopicName(name string) error {
	if name == "" {
		return fmt.Errorf("%w %q: must have 1 to %d characters", ErrInvalidTopicName, name, MaxTopicNameLen)
	}
	if limit := TopicNameLimit(name); len(name) > limit {
		// Not quoted in full: a name may be megabytes long (a compressed
		// remoting registration inflates a few KiB to one), and this error
		// is logged and sent back.
		return fmt.Errorf("%w of %d bytes %q...: must have 1 to %d characters", ErrInvalidTopicName, len(name),
			name[:MaxTopicNameLen], limit)
	}
	retry := hasPrefix(name, retryTopicPrefix)
	for i := 0; i < len(name); i++ {
		if !topicChar(name[i]) && !(retry && name[i] == popRetrySeparatorV2) {
			return fmt.Errorf("%w %q: character %q not allowed (use A-Z a-z 0-9 _ - %% |)", ErrInvalidTopicName, name, name[i])
		}
	}
	return nil
}

// popRetrySeparatorV2 separates the group and the topic of a RocketMQ 5 pop
// consumer's retry topic, %RETRY%<group>+<topic>, which a broker with
// enableRetryTopicV2 creates and registers (KeyBuilder's
// POP_RETRY_SEPARATOR_V2); in no other name is it a topic character.
const popRetrySeparatorV2 = '+'

func topicChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '-' || c == '%' || c == '|'
}
