package wire

import (
	"strconv"

	"github.com/fxamacker/cbor/v2"
)

// Type identifies a message. A request and its response share the type; the
// frame's ID matches them. PROTOCOL.md lists who may send each type.
type Type uint16

// Message types. Numbers are part of the protocol: never reuse one.
const (
	// Broker session (role broker, or operator).
	TypeRegister     Type = 1 // Register -> RegisterAck
	TypeUpdateTopics Type = 2 // UpdateTopics -> LeaseAck
	TypeHeartbeat    Type = 3 // Heartbeat -> LeaseAck
	TypeUnregister   Type = 4 // Unregister -> (no body)

	// Queries (role client, broker or operator).
	TypeGetRoutes         Type = 10 // GetRoutes -> Routes
	TypeClusterInfo       Type = 11 // (no body) -> ClusterInfo
	TypeTopics            Type = 12 // TopicsQuery -> TopicList
	TypeBrokerMemberGroup Type = 13 // MemberGroupQuery -> BrokerData
	TypeWatch             Type = 14 // Watch -> WatchAck, then RouteEvent pushes
	TypeRouteEvent        Type = 15 // pushed by the node on a watch stream, ID 0
	TypeUnwatch           Type = 16 // Unwatch -> WatchAck
	TypePing              Type = 17 // (no body, or Ping) -> Pong
	TypeNodeInfo          Type = 18 // (no body) -> NodeInfo (role operator)

	// Administration (role operator).
	TypeDeleteTopic   Type = 20 // DeleteTopic -> (no body)
	TypeWipeWritePerm Type = 21 // PermRequest -> PermResult
	TypeAddWritePerm  Type = 22 // PermRequest -> PermResult
	TypeKVPut         Type = 23 // KVRequest -> (no body)
	TypeKVGet         Type = 24 // KVRequest -> KVValue
	TypeKVDelete      Type = 25 // KVRequest -> (no body)
	TypeKVList        Type = 26 // KVRequest -> KVList
	TypeLeases        Type = 27 // (no body) -> LeaseList

	// Policies (role operator).
	TypePolicyPush     Type = 30 // PolicyPush -> PolicyInfo
	TypePolicyList     Type = 31 // (no body) -> PolicyList
	TypePolicyRollback Type = 32 // PolicyHook -> PolicyInfo
	TypePolicyRemove   Type = 33 // PolicyHook -> PolicyInfo
	TypePolicyTest     Type = 34 // PolicyTest -> PolicyTestResult
)

var typeNames = map[Type]string{
	TypeRegister: "register", TypeUpdateTopics: "update-topics", TypeHeartbeat: "heartbeat",
	TypeUnregister: "unregister", TypeGetRoutes: "get-routes", TypeClusterInfo: "cluster-info",
	TypeTopics: "topics", TypeBrokerMemberGroup: "broker-member-group", TypeWatch: "watch",
	TypeRouteEvent: "route-event", TypeUnwatch: "unwatch", TypePing: "ping", TypeNodeInfo: "node-info",
	TypeDeleteTopic: "delete-topic", TypeWipeWritePerm: "wipe-write-perm",
	TypeAddWritePerm: "add-write-perm", TypeKVPut: "kv-put", TypeKVGet: "kv-get",
	TypeKVDelete: "kv-delete", TypeKVList: "kv-list", TypeLeases: "leases",
	TypePolicyPush: "policy-push", TypePolicyList: "policy-list", TypePolicyRollback: "policy-rollback",
	TypePolicyRemove: "policy-remove", TypePolicyTest: "policy-test",
}

// String returns the type's name as used in errors, logs and metrics.
func (t Type) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return "unknown"
}

// Known reports whether t is a message type of this protocol version. It
// runs on every request: an array index, not a map lookup.
func (t Type) Known() bool { return int(t) < len(knownTypes) && knownTypes[t] }

// knownTypes marks the types of typeNames, by number.
var knownTypes = func() (known [TypePolicyTest + 1]bool) {
	for t := range typeNames {
		known[t] = true // a type numbered past the array panics at init: grow the array with it
	}
	return known
}()

// Frame is the unit on every stream: a 4-byte big-endian length, then this
// CBOR map. Requests carry Body; responses carry Body or Error.
type Frame struct {
	Type  Type            `cbor:"1,keyasint"`
	ID    uint64          `cbor:"2,keyasint,omitempty"`
	Body  cbor.RawMessage `cbor:"3,keyasint,omitempty"`
	Error *Error          `cbor:"4,keyasint,omitempty"`
}

// Register is a broker's full registration.
type Register struct {
	Cluster      string        `cbor:"1,keyasint"`
	BrokerName   string        `cbor:"2,keyasint"`
	BrokerID     int64         `cbor:"3,keyasint"`
	Addr         string        `cbor:"4,keyasint"`
	HAAddr       string        `cbor:"5,keyasint,omitempty"`
	Zone         string        `cbor:"6,keyasint,omitempty"`
	ActingMaster bool          `cbor:"7,keyasint,omitempty"`
	DataVersion  DataVersion   `cbor:"8,keyasint"`
	Topics       []TopicConfig `cbor:"9,keyasint"`
	// HeartbeatTimeoutMs is how long the broker may stay silent, in
	// milliseconds; 0 means the node's default.
	HeartbeatTimeoutMs uint64 `cbor:"10,keyasint,omitempty"`
}

// RegisterAck acknowledges a registration.
type RegisterAck struct {
	Lease        LeaseAck `cbor:"1,keyasint"`
	MasterAddr   string   `cbor:"2,keyasint,omitempty"`
	MasterHAAddr string   `cbor:"3,keyasint,omitempty"`
}

// LeaseAck tells a broker its lease was renewed: the epoch to name in later
// frames, and when the lease runs out.
type LeaseAck struct {
	Epoch uint64 `cbor:"1,keyasint"`
	// DeadlineMs is the lease's deadline in Unix milliseconds, by the node's
	// clock.
	DeadlineMs int64 `cbor:"2,keyasint"`
	// VersionChanged asks the broker to register in full: the node holds a
	// different data version.
	VersionChanged bool `cbor:"3,keyasint,omitempty"`
	// HeartbeatIntervalMs is the heartbeat period the node expects of its
	// brokers, in milliseconds (its --heartbeat-interval); 0 from nodes
	// that do not say. A broker heartbeats at least this often.
	HeartbeatIntervalMs uint64 `cbor:"4,keyasint,omitempty"`
	// ThresholdMs is how long this lease may go without a heartbeat now,
	// in milliseconds (the broker's requested timeout, the node's
	// --expiry-threshold, or what its expiry policy says); 0 from nodes
	// that do not say.
	ThresholdMs uint64 `cbor:"5,keyasint,omitempty"`
}

// UpdateTopics changes some of a registered broker's topics.
type UpdateTopics struct {
	Cluster     string        `cbor:"1,keyasint"`
	Addr        string        `cbor:"2,keyasint"`
	Epoch       uint64        `cbor:"3,keyasint"`
	DataVersion DataVersion   `cbor:"4,keyasint"`
	Upsert      []TopicConfig `cbor:"5,keyasint,omitempty"`
	Remove      []string      `cbor:"6,keyasint,omitempty"`
}

// Heartbeat renews a lease.
type Heartbeat struct {
	Cluster     string      `cbor:"1,keyasint"`
	Addr        string      `cbor:"2,keyasint"`
	Epoch       uint64      `cbor:"3,keyasint"`
	DataVersion DataVersion `cbor:"4,keyasint"`
}

// Unregister removes a broker, naming the epoch of its registration.
type Unregister struct {
	Cluster string `cbor:"1,keyasint"`
	Addr    string `cbor:"2,keyasint"`
	Epoch   uint64 `cbor:"3,keyasint"`
}

// ClientAttrs describe the asking client to route policies.
type ClientAttrs struct {
	Zone   string            `cbor:"1,keyasint,omitempty"`
	Labels map[string]string `cbor:"2,keyasint,omitempty"`
	// OverCapsSent is set by the decoder when the attrs received exceeded
	// a cap (MaxClientLabels and the byte caps); Zone and Labels are then
	// empty. It is never sent.
	OverCapsSent bool `cbor:"-" json:"-"`
}

// TopicVersion names a topic and the route version the client holds (0 for
// none).
type TopicVersion struct {
	Topic   string `cbor:"1,keyasint"`
	Version uint64 `cbor:"2,keyasint,omitempty"`
}

// GetRoutes asks for the routes of one or more topics. A topic whose version
// matches gets StatusNotModified and no route.
type GetRoutes struct {
	Topics []TopicVersion `cbor:"1,keyasint"`
	Client ClientAttrs    `cbor:"2,keyasint,omitempty"`
}

// RouteStatus is the outcome of one topic in a Routes response.
type RouteStatus uint8

// Route statuses.
const (
	StatusOK          RouteStatus = 0 // Route and Version are set
	StatusNotModified RouteStatus = 1 // the client's version is current
	StatusNotFound    RouteStatus = 2 // no broker holds the topic
	StatusWarmingUp   RouteStatus = 3 // not found, but the node started recently: ask another node or retry
	// StatusPolicyFailed: the node's route policy could not answer for
	// this client and the node fails closed; no route: keep the cached
	// one, ask another node or retry.
	StatusPolicyFailed RouteStatus = 4
)

// String names the status.
func (s RouteStatus) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusNotModified:
		return "not-modified"
	case StatusNotFound:
		return "not-found"
	case StatusWarmingUp:
		return "warming-up"
	case StatusPolicyFailed:
		return "policy-failed"
	}
	return "unknown"
}

// RouteResult is one topic's answer.
type RouteResult struct {
	Topic   string      `cbor:"1,keyasint"`
	Status  RouteStatus `cbor:"2,keyasint,omitempty"`
	Version uint64      `cbor:"3,keyasint,omitempty"`
	// Route is an encoded Route, present with StatusOK.
	Route cbor.RawMessage `cbor:"4,keyasint,omitempty"`
}

// Routes answers GetRoutes, one result per topic asked, in order.
type Routes struct {
	Results []RouteResult `cbor:"1,keyasint"`
	// Groups says how fresh the node's knowledge is of every broker group
	// named by a route of this answer (not-modified ones included), sorted
	// by broker name. Absent from older nodes. It is outside the routes'
	// bytes, so it never changes a route's version.
	Groups []GroupFreshness `cbor:"2,keyasint,omitempty"`
	// Node is the answering node's own state; absent from older nodes.
	Node NodeState `cbor:"3,keyasint,omitempty"`
}

// GroupFreshness is how fresh a node's knowledge of one broker group is,
// measured by the node when it answered. Durations are relative, so they
// need no clock agreement between nodes and clients.
type GroupFreshness struct {
	BrokerName string `cbor:"1,keyasint"`
	// AgeMs is how long ago the node last heard from any member of the
	// group (register, update-topics or heartbeat), in milliseconds.
	AgeMs int64 `cbor:"2,keyasint,omitempty"`
	// DeadlineInMs is how long until the group's last lease runs out, in
	// milliseconds; 0 or less means every member is past its deadline and
	// the node holds it back (an expiry policy delayed its removal).
	DeadlineInMs int64 `cbor:"3,keyasint,omitempty"`
}

// NodeState is what a route answer says about the node that gave it.
type NodeState struct {
	NodeID string `cbor:"1,keyasint,omitempty"`
	// StartedMs is when the node started, in Unix milliseconds.
	StartedMs int64 `cbor:"2,keyasint,omitempty"`
	// WarmingUp: the node is within its warm-up window, so brokers may not
	// have registered with it yet and what it lacks proves nothing.
	WarmingUp bool `cbor:"3,keyasint,omitempty"`
}

// TopicsKind selects a topic list.
type TopicsKind uint8

// Topic lists, as RocketMQ's NameServer offers them.
const (
	TopicsAll                TopicsKind = 0
	TopicsByCluster          TopicsKind = 1
	TopicsSystem             TopicsKind = 2
	TopicsUnit               TopicsKind = 3
	TopicsUnitSub            TopicsKind = 4
	TopicsUnitSubWithoutUnit TopicsKind = 5
)

// TopicsQuery asks for a topic list; Cluster is needed for TopicsByCluster.
type TopicsQuery struct {
	Kind    TopicsKind `cbor:"1,keyasint,omitempty"`
	Cluster string     `cbor:"2,keyasint,omitempty"`
}

// TopicList is a sorted list of topic names.
type TopicList struct {
	Topics []string `cbor:"1,keyasint"`
}

// MemberGroupQuery asks for one broker group's members.
type MemberGroupQuery struct {
	Cluster    string `cbor:"1,keyasint"`
	BrokerName string `cbor:"2,keyasint"`
}

// Watch subscribes the stream to route changes of topics. Each topic names
// the version the client holds; the node pushes a RouteEvent at once for
// each topic whose route differs, then one for every later change.
type Watch struct {
	Topics []TopicVersion `cbor:"1,keyasint"`
	Client ClientAttrs    `cbor:"2,keyasint,omitempty"`
}

// Unwatch ends subscriptions on the stream.
type Unwatch struct {
	Topics []string `cbor:"1,keyasint"`
}

// WatchAck tells how many topics the stream now watches.
type WatchAck struct {
	Watching int `cbor:"1,keyasint"`
}

// RouteEvent is pushed on a watch stream: a topic's route changed (Status
// OK with the route) or it is gone (StatusNotFound).
type RouteEvent struct {
	Result RouteResult `cbor:"1,keyasint"`
	// Groups and Node are as in Routes, for this event's route.
	Groups []GroupFreshness `cbor:"2,keyasint,omitempty"`
	Node   NodeState        `cbor:"3,keyasint,omitempty"`
}

// Ping is the optional body of a ping request. A node ignores it: it is
// there to make the request's packet larger than 42 bytes, the size up to
// which quic-go answers no packet with a stateless reset, so that a ping on
// a connection a restarted node no longer knows draws one (see
// PingPadding).
type Ping struct {
	Padding []byte `cbor:"1,keyasint,omitempty"`
}

// PingPadding is how many padding bytes a probe carries: its packet then
// has 70 bytes or more, well above the 42 that draw no stateless reset.
const PingPadding = 32

// NodeKey is what tells nodes apart, from a Pong or a NodeState: the
// NodeID and the start time. Nodes whose data directories were copied from
// one another share a NodeID but not the millisecond they started in; one
// node listed under two names shares both. Empty from a node that says no
// NodeID.
func NodeKey(nodeID string, startedMs int64) string {
	if nodeID == "" {
		return ""
	}
	return nodeID + "@" + strconv.FormatInt(startedMs, 10)
}

// Pong answers a ping with facts about the node.
type Pong struct {
	NodeID string `cbor:"1,keyasint"`
	// StartedMs is when the node started, in Unix milliseconds.
	StartedMs int64  `cbor:"2,keyasint"`
	WarmingUp bool   `cbor:"3,keyasint,omitempty"`
	Version   string `cbor:"4,keyasint,omitempty"`
}

// NodeInfo answers node-info: what an operator compares across nodes.
type NodeInfo struct {
	NodeID string `cbor:"1,keyasint"`
	// StartedMs and NowMs are Unix milliseconds by the node's clock.
	StartedMs int64  `cbor:"2,keyasint"`
	NowMs     int64  `cbor:"3,keyasint"`
	WarmingUp bool   `cbor:"4,keyasint,omitempty"`
	Version   string `cbor:"5,keyasint,omitempty"`
	// Leases, Topics and Connections count live brokers, topics and open
	// QUIC connections.
	Leases      int `cbor:"6,keyasint,omitempty"`
	Topics      int `cbor:"7,keyasint,omitempty"`
	Connections int `cbor:"8,keyasint,omitempty"`
	// Policies maps each hook with an active module to the module's
	// SHA-256 (hex); a hook with the built-in behaviour is absent.
	Policies map[string]string `cbor:"9,keyasint,omitempty"`
}

// DeleteTopic deletes a topic everywhere, or only from the named clusters.
type DeleteTopic struct {
	Topic    string   `cbor:"1,keyasint"`
	Clusters []string `cbor:"2,keyasint,omitempty"`
}

// PermRequest names a broker group whose write permission to change.
type PermRequest struct {
	BrokerName string `cbor:"1,keyasint"`
}

// PermResult tells how many topics changed.
type PermResult struct {
	Changed int `cbor:"1,keyasint"`
}

// KVRequest addresses the KV config. Value is used by put; Key by put, get
// and delete.
type KVRequest struct {
	Namespace string `cbor:"1,keyasint"`
	Key       string `cbor:"2,keyasint,omitempty"`
	Value     string `cbor:"3,keyasint,omitempty"`
}

// KVValue answers a get.
type KVValue struct {
	Value string `cbor:"1,keyasint"`
}

// KVList answers a list: every key of the namespace.
type KVList struct {
	Entries map[string]string `cbor:"1,keyasint"`
}

// LeaseInfo describes one live broker.
type LeaseInfo struct {
	Cluster         string      `cbor:"1,keyasint"`
	Addr            string      `cbor:"2,keyasint"`
	BrokerName      string      `cbor:"3,keyasint"`
	BrokerID        int64       `cbor:"4,keyasint"`
	Zone            string      `cbor:"5,keyasint,omitempty"`
	Epoch           uint64      `cbor:"6,keyasint"`
	DataVersion     DataVersion `cbor:"7,keyasint"`
	LastHeartbeatMs int64       `cbor:"8,keyasint"`
	DeadlineMs      int64       `cbor:"9,keyasint"`
	ThresholdMs     int64       `cbor:"10,keyasint"`
	Heartbeats      uint64      `cbor:"11,keyasint,omitempty"`
}

// LeaseList answers a leases request.
type LeaseList struct {
	Leases []LeaseInfo `cbor:"1,keyasint"`
}

// PolicyHooks names the policy hooks as the protocol and the CLI spell them.
var PolicyHooks = []string{"route", "expiry", "confirm"}

// PolicyPush uploads a WebAssembly policy module and activates it for a
// hook ("route", "expiry" or "confirm") once it passes validation.
type PolicyPush struct {
	Hook   string `cbor:"1,keyasint"`
	Module []byte `cbor:"2,keyasint"`
	// TimeoutMs is how long the sender waits for the answer: the node
	// answers within it or changes nothing. 0: the node's own bound.
	TimeoutMs int64 `cbor:"3,keyasint,omitempty"`
}

// PolicyHook names a hook to roll back or clear.
type PolicyHook struct {
	Hook string `cbor:"1,keyasint"`
}

// PolicyInfo is the state of one hook on a node.
type PolicyInfo struct {
	Hook string `cbor:"1,keyasint"`
	// Hash is the active module's SHA-256 (hex); empty when the hook has
	// the built-in behaviour.
	Hash          string `cbor:"2,keyasint,omitempty"`
	Size          int    `cbor:"3,keyasint,omitempty"`
	ActivatedAtMs int64  `cbor:"4,keyasint,omitempty"`
	Calls         uint64 `cbor:"5,keyasint,omitempty"`
	Errors        uint64 `cbor:"6,keyasint,omitempty"`
	Fallbacks     uint64 `cbor:"7,keyasint,omitempty"`
	P50Micros     int64  `cbor:"8,keyasint,omitempty"`
	P99Micros     int64  `cbor:"9,keyasint,omitempty"`
	// LastGoodHash is what a rollback would restore.
	LastGoodHash string `cbor:"10,keyasint,omitempty"`
	// Modules are the counters of every module the node remembers for
	// the hook (active, last good, replaced, deactivated), oldest first.
	Modules []PolicyModuleInfo `cbor:"11,keyasint,omitempty"`
	// SavedHash is a module saved as the hook's active one that is not
	// in use: the node is restoring it after a start, or could not, and
	// SavedError says why (it tries again at its next start). Hash is
	// then empty: the hook has the built-in behaviour meanwhile.
	SavedHash  string `cbor:"12,keyasint,omitempty"`
	SavedError string `cbor:"13,keyasint,omitempty"`
}

// PolicyModuleInfo is one module's record for a hook.
type PolicyModuleInfo struct {
	Hash string `cbor:"1,keyasint"`
	// State is active, last_good, replaced or deactivated.
	State     string `cbor:"2,keyasint"`
	Calls     uint64 `cbor:"3,keyasint,omitempty"`
	Errors    uint64 `cbor:"4,keyasint,omitempty"`
	Fallbacks uint64 `cbor:"5,keyasint,omitempty"`
	// Deactivated says why the node deactivated the module, if it did.
	Deactivated string `cbor:"6,keyasint,omitempty"`
}

// PolicyList answers policy-list: one entry per hook.
type PolicyList struct {
	Policies []PolicyInfo `cbor:"1,keyasint"`
}

// PolicyTest runs a module's hook once on the node without activating
// anything. Input is the hook's CBOR input (see wasm/ABI.md); absent means
// the built-in sample.
type PolicyTest struct {
	Hook   string          `cbor:"1,keyasint"`
	Module []byte          `cbor:"2,keyasint"`
	Input  cbor.RawMessage `cbor:"3,keyasint,omitempty"`
	// TimeoutMs is as in PolicyPush.
	TimeoutMs int64 `cbor:"4,keyasint,omitempty"`
}

// PolicyTestResult is the hook's checked output (CBOR, see wasm/ABI.md)
// and how long the call took.
type PolicyTestResult struct {
	Hash       string          `cbor:"1,keyasint"`
	Output     cbor.RawMessage `cbor:"2,keyasint,omitempty"`
	DurationUs int64           `cbor:"3,keyasint,omitempty"`
}
