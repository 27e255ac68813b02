package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The protocol's test vectors live in testdata/wire at the module root, one
// JSON file per message (see PROTOCOL.md, "Test vectors"). TestVectors checks
// every file both ways; `go test ./wire -run TestVectors -update` rewrites them
// from the table below, together with the committed fuzz seed corpora.
var update = flag.Bool("update", false, "rewrite testdata/wire vectors and the fuzz seed corpora from the vector table")

const vectorDir = "../testdata/wire"

// vectorFile is the on-disk format of one test vector.
type vectorFile struct {
	// Type is the Go type name of the value.
	Type        string `json:"type"`
	Description string `json:"description"`
	// Hex is the value's CBOR. For files named frame-*.json it is the whole
	// frame, 4-byte length prefix included.
	Hex string `json:"hex"`
	// Value is the value as JSON with Go field names.
	Value json.RawMessage `json:"value"`
}

func factory[T any]() func() any { return func() any { return new(T) } }

// vectorTypes maps a vector's type name to a constructor of that Go type.
var vectorTypes = map[string]func() any{
	"Frame":            factory[Frame](),
	"Error":            factory[Error](),
	"Register":         factory[Register](),
	"RegisterAck":      factory[RegisterAck](),
	"LeaseAck":         factory[LeaseAck](),
	"UpdateTopics":     factory[UpdateTopics](),
	"Heartbeat":        factory[Heartbeat](),
	"Unregister":       factory[Unregister](),
	"ClientAttrs":      factory[ClientAttrs](),
	"TopicVersion":     factory[TopicVersion](),
	"GetRoutes":        factory[GetRoutes](),
	"RouteResult":      factory[RouteResult](),
	"Routes":           factory[Routes](),
	"TopicsQuery":      factory[TopicsQuery](),
	"TopicList":        factory[TopicList](),
	"MemberGroupQuery": factory[MemberGroupQuery](),
	"Watch":            factory[Watch](),
	"Unwatch":          factory[Unwatch](),
	"WatchAck":         factory[WatchAck](),
	"RouteEvent":       factory[RouteEvent](),
	"Ping":             factory[Ping](),
	"Pong":             factory[Pong](),
	"GroupFreshness":   factory[GroupFreshness](),
	"NodeState":        factory[NodeState](),
	"NodeInfo":         factory[NodeInfo](),
	"DeleteTopic":      factory[DeleteTopic](),
	"PermRequest":      factory[PermRequest](),
	"PermResult":       factory[PermResult](),
	"KVRequest":        factory[KVRequest](),
	"KVValue":          factory[KVValue](),
	"KVList":           factory[KVList](),
	"LeaseInfo":        factory[LeaseInfo](),
	"LeaseList":        factory[LeaseList](),
	"PolicyPush":       factory[PolicyPush](),
	"PolicyHook":       factory[PolicyHook](),
	"PolicyInfo":       factory[PolicyInfo](),
	"PolicyList":       factory[PolicyList](),
	"PolicyTest":       factory[PolicyTest](),
	"PolicyTestResult": factory[PolicyTestResult](),
	"TopicConfig":      factory[TopicConfig](),
	"DataVersion":      factory[DataVersion](),
	"QueueData":        factory[QueueData](),
	"BrokerData":       factory[BrokerData](),
	"Route":            factory[Route](),
	"ClusterInfo":      factory[ClusterInfo](),
}

// bodies tells the body type of each message type's request and response;
// nil means the frame carries no body.
type bodies struct{ req, resp func() any }

// optionalRequestBody lists the message types whose request may carry a
// body or none.
var optionalRequestBody = map[Type]bool{TypePing: true}

var messageBodies = map[Type]bodies{
	TypeRegister:          {factory[Register](), factory[RegisterAck]()},
	TypeUpdateTopics:      {factory[UpdateTopics](), factory[LeaseAck]()},
	TypeHeartbeat:         {factory[Heartbeat](), factory[LeaseAck]()},
	TypeUnregister:        {factory[Unregister](), nil},
	TypeGetRoutes:         {factory[GetRoutes](), factory[Routes]()},
	TypeClusterInfo:       {nil, factory[ClusterInfo]()},
	TypeTopics:            {factory[TopicsQuery](), factory[TopicList]()},
	TypeBrokerMemberGroup: {factory[MemberGroupQuery](), factory[BrokerData]()},
	TypeWatch:             {factory[Watch](), factory[WatchAck]()},
	TypeRouteEvent:        {nil, factory[RouteEvent]()}, // pushed by the node only
	TypeUnwatch:           {factory[Unwatch](), factory[WatchAck]()},
	TypePing:              {factory[Ping](), factory[Pong]()}, // the request body is optional
	TypeNodeInfo:          {nil, factory[NodeInfo]()},
	TypeDeleteTopic:       {factory[DeleteTopic](), nil},
	TypeWipeWritePerm:     {factory[PermRequest](), factory[PermResult]()},
	TypeAddWritePerm:      {factory[PermRequest](), factory[PermResult]()},
	TypeKVPut:             {factory[KVRequest](), nil},
	TypeKVGet:             {factory[KVRequest](), factory[KVValue]()},
	TypeKVDelete:          {factory[KVRequest](), nil},
	TypeKVList:            {factory[KVRequest](), factory[KVList]()},
	TypeLeases:            {nil, factory[LeaseList]()},
	TypePolicyPush:        {factory[PolicyPush](), factory[PolicyInfo]()},
	TypePolicyList:        {nil, factory[PolicyList]()},
	TypePolicyRollback:    {factory[PolicyHook](), factory[PolicyInfo]()},
	TypePolicyRemove:      {factory[PolicyHook](), factory[PolicyInfo]()},
	TypePolicyTest:        {factory[PolicyTest](), factory[PolicyTestResult]()},
}

// allTypes returns every message type of this protocol version, in order.
func allTypes() []Type {
	var ts []Type
	for t := range typeNames {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts
}

// routeVersion is a route's version as PROTOCOL.md defines it: the first 8
// bytes, big-endian, of the SHA-256 of the route's encoding; 0 becomes 1.
func routeVersion(route []byte) uint64 {
	sum := sha256.Sum256(route)
	if v := binary.BigEndian.Uint64(sum[:8]); v != 0 {
		return v
	}
	return 1
}

func mustMarshal(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := Marshal(v)
	if err != nil {
		tb.Fatalf("marshal %T: %v", v, err)
	}
	return b
}

// vector is one entry of the table that -update writes.
type vector struct {
	name  string // file name without .json
	desc  string
	value any // a pointer to the value
}

// vectorTable returns the vectors, built from realistic sample values. Frame
// vectors embed the same bodies as the body vectors.
func vectorTable(tb testing.TB) []vector {
	tb.Helper()
	const (
		cluster = "DefaultCluster"
		addrA0  = "192.0.2.10:10911"
		addrA1  = "192.0.2.11:10911"
		addrB0  = "192.0.2.20:10911"
	)
	dv := DataVersion{State: 3, Timestamp: 1735689600000, Counter: 42}
	topicTest := TopicConfig{Name: "TopicTest", ReadQueues: 8, WriteQueues: 8, Perm: PermRead | PermWrite}
	topicUnit := TopicConfig{Name: "OrderTopic", ReadQueues: 4, WriteQueues: 4, Perm: PermRead | PermWrite | PermInherit, SysFlag: SysFlagUnit}
	register := Register{
		Cluster: cluster, BrokerName: "broker-a", BrokerID: MasterID, Addr: addrA0,
		HAAddr: "192.0.2.10:10912", Zone: "zone-1", DataVersion: dv,
		Topics: []TopicConfig{topicTest, topicUnit}, HeartbeatTimeoutMs: 90000,
	}
	registerSlave := Register{
		Cluster: cluster, BrokerName: "broker-a", BrokerID: 1, Addr: addrA1,
		ActingMaster: true, DataVersion: DataVersion{State: 1},
		Topics: []TopicConfig{},
	}
	leaseAck := LeaseAck{Epoch: 7, DeadlineMs: 1735689720000}
	registerAck := RegisterAck{Lease: LeaseAck{Epoch: 8, DeadlineMs: 1735689720000}, MasterAddr: addrA0, MasterHAAddr: "192.0.2.10:10912"}
	updateTopics := UpdateTopics{
		Cluster: cluster, Addr: addrA0, Epoch: 7,
		DataVersion: DataVersion{State: 3, Timestamp: 1735689660000, Counter: 43},
		Upsert:      []TopicConfig{{Name: "NewTopic", ReadQueues: 16, WriteQueues: 16, Perm: PermRead | PermWrite}},
		Remove:      []string{"OldTopic"},
	}
	heartbeat := Heartbeat{Cluster: cluster, Addr: addrA0, Epoch: 7, DataVersion: dv}
	heartbeatAck := LeaseAck{Epoch: 7, DeadlineMs: 1735689750000, VersionChanged: true}
	leaseAckTimings := LeaseAck{Epoch: 7, DeadlineMs: 1735689650000, HeartbeatIntervalMs: 5000, ThresholdMs: 20000}
	registerAckTimings := RegisterAck{Lease: leaseAckTimings}
	unregister := Unregister{Cluster: cluster, Addr: addrA0, Epoch: 7}

	brokerA := BrokerData{Cluster: cluster, Name: "broker-a", Zone: "zone-1", Addrs: map[int64]string{MasterID: addrA0, 1: addrA1}}
	brokerB := BrokerData{Cluster: cluster, Name: "broker-b", Addrs: map[int64]string{MasterID: addrB0}}
	route := Route{
		Queues: []QueueData{
			{BrokerName: "broker-a", ReadQueues: 8, WriteQueues: 8, Perm: PermRead | PermWrite},
			{BrokerName: "broker-b", ReadQueues: 4, WriteQueues: 4, Perm: PermRead},
		},
		Brokers: []BrokerData{brokerA, brokerB},
	}
	routeBytes := mustMarshal(tb, &route)
	routeVer := routeVersion(routeBytes)
	orderRoute := Route{
		Queues:  []QueueData{{BrokerName: "broker-a", ReadQueues: 4, WriteQueues: 4, Perm: PermRead | PermWrite | PermInherit, SysFlag: SysFlagUnit}},
		Brokers: []BrokerData{brokerA},
	}
	orderBytes := mustMarshal(tb, &orderRoute)
	orderVer := routeVersion(orderBytes)

	clientAttrs := ClientAttrs{Zone: "zone-1", Labels: map[string]string{"app": "checkout", "canary": "true"}}
	getRoutes := GetRoutes{
		Topics: []TopicVersion{{Topic: "TopicTest"}, {Topic: "OrderTopic", Version: orderVer}, {Topic: "NoSuchTopic"}},
		Client: clientAttrs,
	}
	getRoutesOne := GetRoutes{Topics: []TopicVersion{{Topic: "TopicTest"}}}
	resultOK := RouteResult{Topic: "TopicTest", Status: StatusOK, Version: routeVer, Route: routeBytes}
	routes := Routes{Results: []RouteResult{
		resultOK,
		{Topic: "OrderTopic", Status: StatusNotModified, Version: orderVer},
		{Topic: "NoSuchTopic", Status: StatusNotFound},
	}}
	routesWarming := Routes{Results: []RouteResult{{Topic: "TopicTest", Status: StatusWarmingUp}}}
	clusterInfo := ClusterInfo{
		Clusters: map[string][]string{cluster: {"broker-a", "broker-b"}},
		Groups:   map[string]BrokerData{"broker-a": brokerA, "broker-b": brokerB},
	}
	topicsQuery := TopicsQuery{Kind: TopicsByCluster, Cluster: cluster}
	topicList := TopicList{Topics: []string{"OrderTopic", "TopicTest"}}
	memberQuery := MemberGroupQuery{Cluster: cluster, BrokerName: "broker-a"}
	watch := Watch{Topics: []TopicVersion{{Topic: "TopicTest", Version: routeVer}, {Topic: "OrderTopic"}}, Client: ClientAttrs{Zone: "zone-1"}}
	watchAck := WatchAck{Watching: 2}
	unwatch := Unwatch{Topics: []string{"OrderTopic"}}
	unwatchAck := WatchAck{Watching: 1}
	event := RouteEvent{Result: RouteResult{Topic: "OrderTopic", Status: StatusOK, Version: orderVer, Route: orderBytes}}
	eventGone := RouteEvent{Result: RouteResult{Topic: "OrderTopic", Status: StatusNotFound}}
	pingPadded := Ping{Padding: make([]byte, PingPadding)}
	pong := Pong{NodeID: "node-7f3a", StartedMs: 1735689000000, WarmingUp: true, Version: "v0.1.0"}
	deleteTopic := DeleteTopic{Topic: "OldTopic", Clusters: []string{cluster}}
	permReq := PermRequest{BrokerName: "broker-a"}
	permRes := PermResult{Changed: 2}
	kvPut := KVRequest{Namespace: "ORDER_TOPIC_CONFIG", Key: "OrderTopic", Value: "broker-a:4"}
	kvGet := KVRequest{Namespace: "ORDER_TOPIC_CONFIG", Key: "OrderTopic"}
	kvList := KVRequest{Namespace: "ORDER_TOPIC_CONFIG"}
	kvValue := KVValue{Value: "broker-a:4"}
	kvEntries := KVList{Entries: map[string]string{"OrderTopic": "broker-a:4", "PayTopic": "broker-b:8"}}
	// A tiny module stands in for a real one: vectors show the framing.
	module := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	policyPush := PolicyPush{Hook: "route", Module: module}
	policyHook := PolicyHook{Hook: "route"}
	policyInfo := PolicyInfo{Hook: "route", Hash: "93a44bbb96c751218e4c00d479e4c14358122a389acca16205b1e4d0dc5f9476",
		Size: 8, ActivatedAtMs: 1735689600000, Calls: 1200, Errors: 1, Fallbacks: 1, P50Micros: 4, P99Micros: 35}
	policyList := PolicyList{Policies: []PolicyInfo{policyInfo, {Hook: "expiry"}, {Hook: "confirm"}}}
	policyTest := PolicyTest{Hook: "expiry", Module: module, Input: []byte{0xa1, 0x03, 0x1a, 0x00, 0x01, 0xd4, 0xc0}}
	policyTestResult := PolicyTestResult{Hash: policyInfo.Hash, Output: []byte{0xa1, 0x01, 0x1a, 0x00, 0x02, 0xbf, 0x20}, DurationUs: 41}
	leaseA := LeaseInfo{
		Cluster: cluster, Addr: addrA0, BrokerName: "broker-a", BrokerID: MasterID, Zone: "zone-1",
		Epoch: 7, DataVersion: dv, LastHeartbeatMs: 1735689630000, DeadlineMs: 1735689720000,
		ThresholdMs: 90000, Heartbeats: 12,
	}
	leaseB := LeaseInfo{
		Cluster: cluster, Addr: addrB0, BrokerName: "broker-b", BrokerID: MasterID,
		Epoch: 9, DataVersion: DataVersion{State: 1, Timestamp: 1735689500000}, LastHeartbeatMs: 1735689640000,
		DeadlineMs: 1735689760000, ThresholdMs: 120000,
	}
	leases := LeaseList{Leases: []LeaseInfo{leaseA, leaseB}}
	freshA := GroupFreshness{BrokerName: "broker-a", AgeMs: 4200, DeadlineInMs: 85800}
	freshB := GroupFreshness{BrokerName: "broker-b", AgeMs: 131000, DeadlineInMs: -11000}
	nodeState := NodeState{NodeID: "node-7f3a", StartedMs: 1735689000000}
	routesFresh := Routes{Results: routes.Results, Groups: []GroupFreshness{freshA, freshB}, Node: nodeState}
	eventFresh := RouteEvent{Result: event.Result, Groups: []GroupFreshness{freshA}, Node: nodeState}
	nodeInfo := NodeInfo{NodeID: "node-7f3a", StartedMs: 1735689000000, NowMs: 1735689630000, Version: "v0.1.0",
		Leases: 2, Topics: 2, Connections: 14, Policies: map[string]string{"route": policyInfo.Hash}}
	staleEpoch := Error{Code: CodeStaleEpoch, Message: "epoch 6, current 7"}

	vs := []vector{
		// Data types.
		{"data-version", "DataVersion: a broker's topic configuration state, compared on every heartbeat.", &dv},
		{"data-version-zero", "DataVersion zero value: every field is omitempty, so it encodes as an empty map.", &DataVersion{}},
		{"topic-config", "TopicConfig with perm READ|WRITE|INHERIT (7) and sysFlag unit (1).", &topicUnit},
		{"topic-config-minimal", "TopicConfig naming only the topic: zero queues, perm and sysFlag are omitted.", &TopicConfig{Name: "TopicTest"}},
		{"queue-data", "QueueData: one broker group's queues of a topic.", &route.Queues[0]},
		{"broker-data", "BrokerData of a group with a master (id 0) and a slave (id 1). Also the response body of broker-member-group.", &brokerA},
		{"route", fmt.Sprintf("Route of TopicTest held by two broker groups; its version is %d (0x%016x), the first 8 bytes of SHA-256 of these bytes.", routeVer, routeVer), &route},
		{"route-order", fmt.Sprintf("Route of OrderTopic held by one broker group; its version is %d (0x%016x).", orderVer, orderVer), &orderRoute},
		{"cluster-info", "ClusterInfo: cluster name -> its broker group names, and group name -> BrokerData. Response body of cluster-info.", &clusterInfo},
		{"lease-info", "LeaseInfo of a live master broker.", &leaseA},
		{"client-attrs", "ClientAttrs: the asking client's zone and labels, passed to route policies.", &clientAttrs},
		{"topic-version", "TopicVersion: a topic and the route version the client holds.", &getRoutes.Topics[1]},
		{"route-result", "RouteResult with status ok (0, omitted): Route holds the encoded Route inline (not as a byte string) and Version is its version.", &resultOK},
		{"error", "Error: code 8 (stale epoch) and a message.", &staleEpoch},
		{"error-code-only", "Error with only a code (message omitted).", &Error{Code: CodeNotFound}},

		// Request and response bodies.
		{"register", "Register (type 1) from a master: full registration with two topics and a heartbeat timeout of 90 s.", &register},
		{"register-slave", "Register (type 1) from a slave with ActingMaster set, no topics (an empty array), and the optional fields omitted.", &registerSlave},
		{"register-ack", "RegisterAck (type 1 response) to a slave: the lease, and the master's addresses.", &registerAck},
		{"lease-ack", "LeaseAck (type 2 and 3 response): epoch and deadline in Unix milliseconds; VersionChanged false is omitted.", &leaseAck},
		{"lease-ack-timings", "LeaseAck from a node run with --heartbeat-interval 5s --expiry-threshold 20s: it tells the broker its heartbeat interval (key 4) and the lease's threshold (key 5), in milliseconds; older nodes omit both.", &leaseAckTimings},
		{"register-ack-timings", "RegisterAck whose lease carries the node's heartbeat interval and the lease's threshold (lease-ack-timings.json).", &registerAckTimings},
		{"lease-ack-version-changed", "LeaseAck to a heartbeat when the node holds another data version: the broker must send a full register.", &heartbeatAck},
		{"update-topics", "UpdateTopics (type 2): upsert one topic and remove one, naming lease epoch 7 and the new data version.", &updateTopics},
		{"heartbeat", "Heartbeat (type 3) naming lease epoch 7 and the broker's data version.", &heartbeat},
		{"unregister", "Unregister (type 4) of the registration with epoch 7.", &unregister},
		{"get-routes", "GetRoutes (type 10) for three topics, one naming the version the client holds, with client attributes.", &getRoutes},
		{"get-routes-one", "GetRoutes (type 10) for one topic, no version held, no client attributes (key 2 omitted).", &getRoutesOne},
		{"routes", "Routes (type 10 response): results in the order asked: ok with the route, not-modified (1) without it, not-found (2).", &routes},
		{"routes-warming-up", "Routes with status warming-up (3): the node started recently; ask another node or retry.", &routesWarming},
		{"topics-query", "TopicsQuery (type 12) for the topics of one cluster (kind 1).", &topicsQuery},
		{"topics-query-all", "TopicsQuery (type 12) for all topics: kind 0 and no cluster, an empty map.", &TopicsQuery{}},
		{"topic-list", "TopicList (type 12 response): sorted topic names.", &topicList},
		{"member-group-query", "MemberGroupQuery (type 13): one broker group of a cluster.", &memberQuery},
		{"watch", "Watch (type 14) of two topics; the client holds TopicTest's current route.", &watch},
		{"watch-ack", "WatchAck (type 14 and 16 response): how many topics the stream now watches.", &watchAck},
		{"unwatch", "Unwatch (type 16) of one topic.", &unwatch},
		{"route-event", "RouteEvent (type 15, pushed with id 0): OrderTopic's route changed; the new route and version.", &event},
		{"route-event-not-found", "RouteEvent: OrderTopic is gone (status not-found, no route, no version).", &eventGone},
		{"group-freshness", "GroupFreshness: the node last heard from a member of broker-a 4.2 s ago and its lease runs 85.8 s more.", &freshA},
		{"group-freshness-held-back", "GroupFreshness of a group past its deadline (DeadlineInMs negative, a CBOR negative integer): the node's expiry policy holds it back.", &freshB},
		{"node-state", "NodeState: the answering node's id and start time; WarmingUp false is omitted.", &nodeState},
		{"routes-fresh", "Routes with freshness (keys 2 and 3): the results of routes.json, how fresh the node's knowledge of each broker group named is, and the node's state. Older clients ignore keys 2 and 3; the routes' bytes and versions are those of routes.json.", &routesFresh},
		{"route-event-fresh", "RouteEvent with freshness (keys 2 and 3) of its route's broker group and the node's state; key 1 as in route-event.json.", &eventFresh},
		{"node-info", "NodeInfo (type 18 response): identity, clock, counts and the active policy module of each hook.", &nodeInfo},
		{"ping-padded", "Ping (type 17 request body, optional): 32 padding bytes the node ignores, so the probe's packet is large enough to draw a QUIC stateless reset from a restarted node.", &pingPadded},
		{"pong", "Pong (type 17 response): node id, start time in Unix milliseconds, warming-up flag, software version.", &pong},
		{"delete-topic", "DeleteTopic (type 20) from one cluster only.", &deleteTopic},
		{"delete-topic-everywhere", "DeleteTopic (type 20) everywhere: no clusters (key 2 omitted).", &DeleteTopic{Topic: "OldTopic"}},
		{"perm-request", "PermRequest (types 21 and 22): the broker group whose write permission to wipe or add.", &permReq},
		{"perm-result", "PermResult (types 21 and 22 response): how many topics changed.", &permRes},
		{"kv-request-put", "KVRequest for kv-put (type 23): namespace, key and value.", &kvPut},
		{"kv-request-get", "KVRequest for kv-get (type 24) and kv-delete (type 25): namespace and key.", &kvGet},
		{"kv-request-list", "KVRequest for kv-list (type 26): the namespace only.", &kvList},
		{"kv-value", "KVValue (type 24 response).", &kvValue},
		{"kv-list", "KVList (type 26 response): every key of the namespace with its value.", &kvEntries},
		{"lease-list", "LeaseList (type 27 response): one LeaseInfo per live broker.", &leases},
		{"policy-push", "PolicyPush (type 30): the hook and the module's bytes (here only the 8-byte wasm header).", &policyPush},
		{"policy-hook", "PolicyHook (types 32 and 33): the hook to roll back or clear.", &policyHook},
		{"policy-info", "PolicyInfo (types 30, 32, 33 response): the hook's active module and its call statistics.", &policyInfo},
		{"policy-list", "PolicyList (type 31 response): one PolicyInfo per hook; hooks without a module have only key 1.", &policyList},
		{"policy-test", "PolicyTest (type 34): hook, module and a CBOR input for the hook ({3: 120000}, default_ms only).", &policyTest},
		{"policy-test-result", "PolicyTestResult (type 34 response): module hash, the hook's CBOR output ({1: 180000}, threshold_ms) and the call time.", &policyTestResult},
	}

	// Frames: a request and a response for every message type, and errors.
	type fr struct {
		t          Type
		req, resp  any
		reqDesc    string
		respDesc   string
		reqID      uint64
		onlyPushed bool
	}
	frames := []fr{
		{TypeRegister, &register, &RegisterAck{Lease: LeaseAck{Epoch: 7, DeadlineMs: 1735689690000}}, "body: register.json", "body: the master's RegisterAck (no master addresses)", 1, false},
		{TypeUpdateTopics, &updateTopics, &leaseAck, "body: update-topics.json", "body: lease-ack.json", 2, false},
		{TypeHeartbeat, &heartbeat, &heartbeatAck, "body: heartbeat.json", "body: lease-ack-version-changed.json", 3, false},
		{TypeUnregister, &unregister, nil, "body: unregister.json", "no body", 4, false},
		{TypeGetRoutes, &getRoutesOne, &Routes{Results: []RouteResult{resultOK}}, "body: get-routes-one.json", "body: Routes with one ok result (route.json inline)", 5, false},
		{TypeClusterInfo, nil, &clusterInfo, "no body", "body: cluster-info.json", 6, false},
		{TypeTopics, &topicsQuery, &topicList, "body: topics-query.json", "body: topic-list.json", 7, false},
		{TypeBrokerMemberGroup, &memberQuery, &brokerA, "body: member-group-query.json", "body: broker-data.json", 8, false},
		{TypeWatch, &watch, &watchAck, "body: watch.json", "body: watch-ack.json", 9, false},
		{TypeRouteEvent, nil, &event, "", "body: route-event.json; pushed by the node with id 0 (omitted)", 0, true},
		{TypeUnwatch, &unwatch, &unwatchAck, "body: unwatch.json", "body: WatchAck{Watching: 1}", 10, false},
		{TypePing, nil, &pong, "no body", "body: pong.json", 11, false},
		{TypeNodeInfo, nil, &nodeInfo, "no body", "body: node-info.json", 25, false},
		{TypeDeleteTopic, &deleteTopic, nil, "body: delete-topic.json", "no body", 12, false},
		{TypeWipeWritePerm, &permReq, &permRes, "body: perm-request.json", "body: perm-result.json", 13, false},
		{TypeAddWritePerm, &permReq, &permRes, "body: perm-request.json", "body: perm-result.json", 14, false},
		{TypeKVPut, &kvPut, nil, "body: kv-request-put.json", "no body", 15, false},
		{TypeKVGet, &kvGet, &kvValue, "body: kv-request-get.json", "body: kv-value.json", 16, false},
		{TypeKVDelete, &kvGet, nil, "body: kv-request-get.json", "no body", 17, false},
		{TypeKVList, &kvList, &kvEntries, "body: kv-request-list.json", "body: kv-list.json", 18, false},
		{TypeLeases, nil, &leases, "no body", "body: lease-list.json", 19, false},
		{TypePolicyPush, &policyPush, &policyInfo, "body: policy-push.json", "body: policy-info.json", 20, false},
		{TypePolicyList, nil, &policyList, "no body", "body: policy-list.json", 21, false},
		{TypePolicyRollback, &policyHook, &policyInfo, "body: policy-hook.json", "body: policy-info.json", 22, false},
		{TypePolicyRemove, &policyHook, &PolicyInfo{Hook: "route", LastGoodHash: policyInfo.Hash}, "body: policy-hook.json", "body: PolicyInfo with no active module, the removed one as last good", 23, false},
		{TypePolicyTest, &policyTest, &policyTestResult, "body: policy-test.json", "body: policy-test-result.json", 24, false},
	}
	for _, f := range frames {
		if !f.onlyPushed {
			vs = append(vs, vector{
				name:  "frame-" + f.t.String() + "-request",
				desc:  fmt.Sprintf("%s request frame (type %d, id %d); %s. Hex includes the 4-byte length prefix.", f.t, f.t, f.reqID, f.reqDesc),
				value: newFrame(tb, f.t, f.reqID, f.req),
			})
		}
		name, what := "-response", "response"
		if f.onlyPushed {
			name, what = "", "push"
		}
		vs = append(vs, vector{
			name:  "frame-" + f.t.String() + name,
			desc:  fmt.Sprintf("%s %s frame (type %d, id %d); %s. Hex includes the 4-byte length prefix.", f.t, what, f.t, f.reqID, f.respDesc),
			value: newFrame(tb, f.t, f.reqID, f.resp),
		})
	}
	vs = append(vs,
		vector{"frame-register-response-timings", "register response frame (type 1, id 26); body: register-ack-timings.json, with the node's heartbeat interval and the lease's threshold. Hex includes the 4-byte length prefix.",
			newFrame(tb, TypeRegister, 26, &registerAckTimings)},
		vector{"frame-ping-request-padded", "ping request frame (type 17, id 25) as a broker's probe sends it; body: ping-padded.json. Hex includes the 4-byte length prefix.",
			newFrame(tb, TypePing, 25, &pingPadded)},
		vector{"frame-ping-request-id-0", "ping request frame with id 0 (key 2 omitted), as a one-shot stream may send it. Hex includes the 4-byte length prefix.",
			&Frame{Type: TypePing}},
		vector{"frame-get-routes-request-many", "get-routes request frame (type 10, id 20) for three topics with client attributes; body: get-routes.json. Hex includes the 4-byte length prefix.",
			newFrame(tb, TypeGetRoutes, 20, &getRoutes)},
		vector{"frame-get-routes-response-many", "get-routes response frame (type 10, id 20); body: routes.json. Hex includes the 4-byte length prefix.",
			newFrame(tb, TypeGetRoutes, 20, &routes)},
		vector{"frame-get-routes-response-fresh", "get-routes response frame (type 10, id 20) from a node that reports freshness; body: routes-fresh.json. Hex includes the 4-byte length prefix.",
			newFrame(tb, TypeGetRoutes, 20, &routesFresh)},
		vector{"frame-heartbeat-error", "heartbeat error response (type 3, id 3): code 8 stale epoch; no body. Hex includes the 4-byte length prefix.",
			&Frame{Type: TypeHeartbeat, ID: 3, Error: &staleEpoch}},
		vector{"frame-heartbeat-error-lease-not-found", "heartbeat error response (type 3, id 21): code 7 lease not found, so the broker must register in full. Hex includes the 4-byte length prefix.",
			&Frame{Type: TypeHeartbeat, ID: 21, Error: &Error{Code: CodeLeaseNotFound, Message: "broker 192.0.2.10:10911 of cluster \"DefaultCluster\" is not registered: register first"}}},
		vector{"frame-unknown-type-error", "error response to a request of unknown type 99 (id 22): code 3. Hex includes the 4-byte length prefix.",
			&Frame{Type: 99, ID: 22, Error: &Error{Code: CodeUnknownType, Message: "unknown message type 99"}}},
		vector{"frame-get-routes-error-invalid-topic", "get-routes error response (type 10, id 23) to a request naming the topic \"bad topic!\": code 1 for the whole request, as watch answers (section 8.5). Hex includes the 4-byte length prefix.",
			&Frame{Type: TypeGetRoutes, ID: 23, Error: &Error{Code: CodeBadRequest, Message: "invalid argument: " + ValidTopicName("bad topic!").Error()}}},
		vector{"frame-too-large-error", "error frame sent before closing a stream whose frame header announced 2000000 bytes over a client's 1 MiB limit: type 0 and id 0 (the node did not read them), code 2. Hex includes the 4-byte length prefix.",
			&Frame{Error: &Error{Code: CodeFrameTooLarge, Message: (&FrameTooLargeError{Len: 2000000, Limit: DefaultMaxRequestLen}).Error()}}},
	)
	return vs
}

func newFrame(tb testing.TB, t Type, id uint64, body any) *Frame {
	tb.Helper()
	f, err := NewRequest(t, id, body)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

func isFrameVector(name string) bool { return strings.HasPrefix(name, "frame-") }

// encodeVector returns the CBOR of v, as a length-prefixed frame for frame
// vectors.
func encodeVector(name string, v any) ([]byte, error) {
	if isFrameVector(name) {
		f, ok := v.(*Frame)
		if !ok {
			return nil, fmt.Errorf("frame vector holds %T", v)
		}
		return AppendFrame(nil, f)
	}
	return Marshal(v)
}

// decodeVector decodes b into v, reading a length-prefixed frame for frame
// vectors and refusing trailing bytes.
func decodeVector(name string, b []byte, v any) error {
	if !isFrameVector(name) {
		return Unmarshal(b, v)
	}
	f, ok := v.(*Frame)
	if !ok {
		return fmt.Errorf("frame vector decodes into %T", v)
	}
	r := bytes.NewReader(b)
	got, err := ReadFrame(r, MaxFrameLen)
	if err != nil {
		return err
	}
	if r.Len() != 0 {
		return fmt.Errorf("%d bytes after the frame", r.Len())
	}
	*f = got
	return nil
}

func typeName(v any) string { return reflect.TypeOf(v).Elem().Name() }

func writeVectors(t *testing.T, vs []vector) {
	t.Helper()
	if err := os.MkdirAll(vectorDir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	for _, p := range old {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range vs {
		b, err := encodeVector(v.name, v.value)
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		val, err := json.Marshal(v.value)
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		out, err := json.MarshalIndent(vectorFile{Type: typeName(v.value), Description: v.desc, Hex: hex.EncodeToString(b), Value: val}, "", "  ")
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		if err := os.WriteFile(filepath.Join(vectorDir, v.name+".json"), append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d vectors to %s", len(vs), vectorDir)
}

// loadedVector is a vector file read back from disk.
type loadedVector struct {
	name string
	file vectorFile
	cbor []byte
}

func loadVectors(tb testing.TB) []loadedVector {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(paths) == 0 {
		tb.Fatalf("no vectors in %s: run go test ./wire -run TestVectors -update", vectorDir)
	}
	var out []loadedVector
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		lv := loadedVector{name: strings.TrimSuffix(filepath.Base(p), ".json")}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&lv.file); err != nil {
			tb.Fatalf("%s: %v", p, err)
		}
		if lv.cbor, err = hex.DecodeString(lv.file.Hex); err != nil {
			tb.Fatalf("%s: hex: %v", p, err)
		}
		out = append(out, lv)
	}
	return out
}

func TestVectors(t *testing.T) {
	table := vectorTable(t)
	if *update {
		writeVectors(t, table)
		writeFuzzSeeds(t)
	}
	files := loadVectors(t)
	byName := make(map[string]loadedVector, len(files))
	typesSeen := make(map[string]bool)
	framesSeen := make(map[Type]bool)

	for _, lv := range files {
		byName[lv.name] = lv
		t.Run(lv.name, func(t *testing.T) {
			mk := vectorTypes[lv.file.Type]
			if mk == nil {
				t.Fatalf("unknown type %q", lv.file.Type)
			}
			if lv.file.Description == "" {
				t.Error("no description")
			}
			typesSeen[lv.file.Type] = true

			// hex -> value
			fromHex := mk()
			if err := decodeVector(lv.name, lv.cbor, fromHex); err != nil {
				t.Fatalf("decode hex: %v", err)
			}
			fromJSON := mk()
			dec := json.NewDecoder(bytes.NewReader(lv.file.Value))
			dec.DisallowUnknownFields()
			if err := dec.Decode(fromJSON); err != nil {
				t.Fatalf("decode value: %v", err)
			}
			if !reflect.DeepEqual(fromHex, fromJSON) {
				t.Errorf("hex decodes to\n%#v\nvalue is\n%#v", fromHex, fromJSON)
			}

			// value -> hex, byte for byte
			enc, err := encodeVector(lv.name, fromJSON)
			if err != nil {
				t.Fatalf("encode value: %v", err)
			}
			if !bytes.Equal(enc, lv.cbor) {
				t.Errorf("value encodes to\n%x\nfile has\n%x", enc, lv.cbor)
			}

			checkRouteVersions(t, fromHex)
			if f, ok := fromHex.(*Frame); ok {
				framesSeen[f.Type] = true
				checkFrameVector(t, lv.name, f)
			} else if isFrameVector(lv.name) {
				t.Errorf("frame vector of type %s", lv.file.Type)
			}
		})
	}

	// The table and the files agree.
	for _, v := range table {
		lv, ok := byName[v.name]
		if !ok {
			t.Errorf("vector %s missing from %s: run with -update", v.name, vectorDir)
			continue
		}
		b, err := encodeVector(v.name, v.value)
		if err != nil {
			t.Errorf("%s: %v", v.name, err)
			continue
		}
		if !bytes.Equal(b, lv.cbor) {
			t.Errorf("%s: the table encodes to %x, the file has %x: run with -update if the change is intended", v.name, b, lv.cbor)
		}
		if lv.file.Type != typeName(v.value) {
			t.Errorf("%s: file says type %s, table has %s", v.name, lv.file.Type, typeName(v.value))
		}
	}

	// Coverage: every Go type and every message type has a vector.
	for name := range vectorTypes {
		if !typesSeen[name] {
			t.Errorf("no vector of type %s", name)
		}
	}
	for _, typ := range allTypes() {
		if !framesSeen[typ] {
			t.Errorf("no frame vector of message type %d (%s)", typ, typ)
		}
		if _, ok := messageBodies[typ]; !ok {
			t.Errorf("message type %s missing from messageBodies", typ)
		}
	}
}

// checkFrameVector checks that a frame's body decodes as its message type's
// request or response body, as its file name says.
func checkFrameVector(t *testing.T, name string, f *Frame) {
	t.Helper()
	if f.Error != nil {
		if len(f.Body) != 0 {
			t.Error("frame carries both a body and an error")
		}
		return
	}
	bt, ok := messageBodies[f.Type]
	if !ok {
		t.Fatalf("frame of unknown type %d without an error", f.Type)
	}
	mk := bt.resp
	if strings.Contains(name, "-request") {
		mk = bt.req
	}
	if mk == nil {
		if len(f.Body) != 0 {
			t.Errorf("%s frame has a body, want none", f.Type)
		}
		return
	}
	if len(f.Body) == 0 {
		if strings.Contains(name, "-request") && optionalRequestBody[f.Type] {
			return
		}
		t.Fatalf("%s frame has no body", f.Type)
	}
	v := mk()
	if err := f.DecodeBody(v); err != nil {
		t.Fatalf("body: %v", err)
	}
	if b := mustMarshal(t, v); !bytes.Equal(b, f.Body) {
		t.Errorf("body re-encodes to %x, frame has %x", b, f.Body)
	}
	checkRouteVersions(t, v)
}

// checkRouteVersions checks every RouteResult in v carrying a route: the
// version must be the route's version, and the route must decode.
func checkRouteVersions(t *testing.T, v any) {
	t.Helper()
	var results []RouteResult
	switch x := v.(type) {
	case *RouteResult:
		results = []RouteResult{*x}
	case *Routes:
		results = x.Results
	case *RouteEvent:
		results = []RouteResult{x.Result}
	}
	for _, r := range results {
		if len(r.Route) == 0 {
			if r.Status == StatusOK {
				t.Errorf("%s: status ok without a route", r.Topic)
			}
			continue
		}
		if want := routeVersion(r.Route); r.Version != want {
			t.Errorf("%s: version %d, the route's version is %d", r.Topic, r.Version, want)
		}
		var route Route
		if err := Unmarshal(r.Route, &route); err != nil {
			t.Errorf("%s: route: %v", r.Topic, err)
		} else if b := mustMarshal(t, &route); !bytes.Equal(b, r.Route) {
			t.Errorf("%s: route is not in deterministic encoding", r.Topic)
		}
	}
}

// TestVectorFrameLengths checks the length prefix of every frame vector by
// hand, independently of ReadFrame.
func TestVectorFrameLengths(t *testing.T) {
	for _, lv := range loadVectors(t) {
		if !isFrameVector(lv.name) {
			continue
		}
		if len(lv.cbor) < FrameHeaderLen {
			t.Errorf("%s: %d bytes", lv.name, len(lv.cbor))
			continue
		}
		if n := binary.BigEndian.Uint32(lv.cbor); int(n) != len(lv.cbor)-FrameHeaderLen {
			t.Errorf("%s: prefix says %d bytes, %d follow", lv.name, n, len(lv.cbor)-FrameHeaderLen)
		}
	}
}

// writeFuzzSeeds writes the committed seed corpora of the fuzz targets in
// fuzz_test.go from the vectors, in Go's corpus file format.
func writeFuzzSeeds(t *testing.T) {
	t.Helper()
	seeds := fuzzSeedsFromVectors(t)
	for target, list := range map[string][]fuzzSeed{
		"FuzzReadFrame":  seeds.frames,
		"FuzzDecodeBody": seeds.bodies,
		"FuzzRoute":      seeds.routes,
	} {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		old, _ := filepath.Glob(filepath.Join(dir, "vector-*"))
		for _, p := range old {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
		seen := make(map[string]bool)
		for _, s := range list {
			key := fmt.Sprintf("%d/%x", s.typ, s.data)
			if seen[key] {
				continue // the same input under another vector's name
			}
			seen[key] = true
			var b strings.Builder
			b.WriteString("go test fuzz v1\n")
			if target == "FuzzDecodeBody" {
				fmt.Fprintf(&b, "uint16(%d)\n", s.typ)
			}
			fmt.Fprintf(&b, "[]byte(%q)\n", s.data)
			if err := os.WriteFile(filepath.Join(dir, "vector-"+s.name), []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// fuzzSeed is one seed input derived from a vector.
type fuzzSeed struct {
	name string
	typ  uint16 // FuzzDecodeBody only
	data []byte
}

type fuzzSeeds struct{ frames, bodies, routes []fuzzSeed }

// fuzzSeedsFromVectors derives seeds from the vector files: whole frames for
// FuzzReadFrame, (type, body) pairs for FuzzDecodeBody, and routes for
// FuzzRoute.
func fuzzSeedsFromVectors(tb testing.TB) fuzzSeeds {
	tb.Helper()
	// A body type's message type, for body vectors that are not in a frame.
	typeOf := make(map[string]Type)
	for _, typ := range allTypes() {
		for _, mk := range []func() any{messageBodies[typ].req, messageBodies[typ].resp} {
			if mk == nil {
				continue
			}
			if n := typeName(mk()); typeOf[n] == 0 {
				typeOf[n] = typ
			}
		}
	}
	var s fuzzSeeds
	for _, lv := range loadVectors(tb) {
		if isFrameVector(lv.name) {
			s.frames = append(s.frames, fuzzSeed{name: lv.name, data: lv.cbor})
			var f Frame
			if err := decodeVector(lv.name, lv.cbor, &f); err == nil && len(f.Body) > 0 {
				s.bodies = append(s.bodies, fuzzSeed{name: lv.name, typ: uint16(f.Type), data: f.Body})
			}
			continue
		}
		switch lv.file.Type {
		case "Route":
			s.routes = append(s.routes, fuzzSeed{name: lv.name, data: lv.cbor})
		case "Routes", "RouteResult", "RouteEvent":
			v := vectorTypes[lv.file.Type]()
			if err := Unmarshal(lv.cbor, v); err != nil {
				tb.Fatalf("%s: %v", lv.name, err)
			}
			var rs []RouteResult
			switch x := v.(type) {
			case *Routes:
				rs = x.Results
			case *RouteResult:
				rs = []RouteResult{*x}
			case *RouteEvent:
				rs = []RouteResult{x.Result}
			}
			for i, r := range rs {
				if len(r.Route) > 0 {
					s.routes = append(s.routes, fuzzSeed{name: fmt.Sprintf("%s-%d", lv.name, i), data: r.Route})
				}
			}
		}
		if typ, ok := typeOf[lv.file.Type]; ok {
			s.bodies = append(s.bodies, fuzzSeed{name: lv.name, typ: uint16(typ), data: lv.cbor})
		}
	}
	return s
}

// vectorBodies returns the CBOR bodies of the vectors of message type typ;
// it fails tb if there are none.
func vectorBodies(tb testing.TB, typ string) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, lv := range loadVectors(tb) {
		if lv.file.Type == typ {
			out = append(out, lv.cbor)
		}
	}
	if len(out) == 0 {
		tb.Fatalf("no %s vectors", typ)
	}
	return out
}

// decodedVectors returns the vectors of message type typ, decoded.
func decodedVectors[T any](tb testing.TB, typ string) []T {
	tb.Helper()
	var out []T
	for _, body := range vectorBodies(tb, typ) {
		var v T
		if err := Unmarshal(body, &v); err != nil {
			tb.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}
