package client

import (
	"context"
	"fmt"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// Register sends a broker's full registration.
func (c *Conn) Register(ctx context.Context, r *wire.Register) (wire.RegisterAck, error) {
	var ack wire.RegisterAck
	err := c.Call(ctx, wire.TypeRegister, r, &ack)
	return ack, err
}

// UpdateTopics sends an incremental topic change.
func (c *Conn) UpdateTopics(ctx context.Context, u *wire.UpdateTopics) (wire.LeaseAck, error) {
	var ack wire.LeaseAck
	err := c.Call(ctx, wire.TypeUpdateTopics, u, &ack)
	return ack, err
}

// Heartbeat renews a broker's lease.
func (c *Conn) Heartbeat(ctx context.Context, h *wire.Heartbeat) (wire.LeaseAck, error) {
	var ack wire.LeaseAck
	err := c.Call(ctx, wire.TypeHeartbeat, h, &ack)
	return ack, err
}

// Unregister removes a broker's registration of the given epoch.
func (c *Conn) Unregister(ctx context.Context, u *wire.Unregister) error {
	return c.Call(ctx, wire.TypeUnregister, u, nil)
}

// GetRoutes asks for several topics' routes at once.
func (c *Conn) GetRoutes(ctx context.Context, q *wire.GetRoutes) (wire.Routes, error) {
	var rs wire.Routes
	err := c.Call(ctx, wire.TypeGetRoutes, q, &rs)
	if err == nil && len(rs.Results) != len(q.Topics) {
		err = fmt.Errorf("get-routes from %s: %d results for %d topics", c.addr, len(rs.Results), len(q.Topics))
	}
	return rs, err
}

// Route returns one topic's route and version. A topic no broker holds is a
// *wire.Error with CodeNotFound, or CodeWarmingUp when the node started
// recently.
func (c *Conn) Route(ctx context.Context, topic string, attrs wire.ClientAttrs) (wire.Route, uint64, error) {
	rs, err := c.GetRoutes(ctx, &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: topic}}, Client: attrs})
	if err != nil {
		return wire.Route{}, 0, err
	}
	return DecodeResult(&rs.Results[0])
}

// DecodeResult turns one route result into a route, or into the error its
// status stands for.
func DecodeResult(r *wire.RouteResult) (wire.Route, uint64, error) {
	switch r.Status {
	case wire.StatusOK:
		var route wire.Route
		if err := wire.Unmarshal(r.Route, &route); err != nil {
			return route, 0, fmt.Errorf("decode route of %s: %w", r.Topic, err)
		}
		return route, r.Version, nil
	case wire.StatusNotFound:
		return wire.Route{}, 0, wire.Errorf(wire.CodeNotFound, "topic %s not found", r.Topic)
	case wire.StatusWarmingUp:
		return wire.Route{}, 0, wire.Errorf(wire.CodeWarmingUp, "topic %s not found yet: the node is warming up", r.Topic)
	case wire.StatusNotModified:
		return wire.Route{}, r.Version, nil
	case wire.StatusPolicyFailed:
		// Says nothing about the route: this node's route policy failed
		// and fails closed; another node may answer.
		return wire.Route{}, 0, wire.Errorf(wire.CodeUnavailable, "topic %s: the node's route policy failed (fail-closed): ask another node", r.Topic)
	}
	return wire.Route{}, 0, fmt.Errorf("topic %s: unknown route status %d", r.Topic, r.Status)
}

// ClusterInfo returns every cluster and broker group.
func (c *Conn) ClusterInfo(ctx context.Context) (wire.ClusterInfo, error) {
	var ci wire.ClusterInfo
	err := c.Call(ctx, wire.TypeClusterInfo, nil, &ci)
	return ci, err
}

// Topics returns a topic list.
func (c *Conn) Topics(ctx context.Context, q wire.TopicsQuery) ([]string, error) {
	var tl wire.TopicList
	err := c.Call(ctx, wire.TypeTopics, &q, &tl)
	return tl.Topics, err
}

// BrokerMemberGroup returns one broker group's members.
func (c *Conn) BrokerMemberGroup(ctx context.Context, cluster, group string) (wire.BrokerData, error) {
	var bd wire.BrokerData
	err := c.Call(ctx, wire.TypeBrokerMemberGroup, &wire.MemberGroupQuery{Cluster: cluster, BrokerName: group}, &bd)
	return bd, err
}

// Ping returns facts about the node.
func (c *Conn) Ping(ctx context.Context) (wire.Pong, error) {
	var p wire.Pong
	err := c.Call(ctx, wire.TypePing, nil, &p)
	return p, err
}

// DeleteTopic deletes a topic everywhere or in the named clusters.
func (c *Conn) DeleteTopic(ctx context.Context, topic string, clusters ...string) error {
	return c.Call(ctx, wire.TypeDeleteTopic, &wire.DeleteTopic{Topic: topic, Clusters: clusters}, nil)
}

// WipeWritePerm removes write permission from a broker group's topics and
// returns how many changed.
func (c *Conn) WipeWritePerm(ctx context.Context, group string) (int, error) {
	var r wire.PermResult
	err := c.Call(ctx, wire.TypeWipeWritePerm, &wire.PermRequest{BrokerName: group}, &r)
	return r.Changed, err
}

// AddWritePerm restores write permission on a broker group's topics and
// returns how many changed.
func (c *Conn) AddWritePerm(ctx context.Context, group string) (int, error) {
	var r wire.PermResult
	err := c.Call(ctx, wire.TypeAddWritePerm, &wire.PermRequest{BrokerName: group}, &r)
	return r.Changed, err
}

// KVPut sets a KV config value.
func (c *Conn) KVPut(ctx context.Context, namespace, key, value string) error {
	return c.Call(ctx, wire.TypeKVPut, &wire.KVRequest{Namespace: namespace, Key: key, Value: value}, nil)
}

// KVGet reads a KV config value.
func (c *Conn) KVGet(ctx context.Context, namespace, key string) (string, error) {
	var v wire.KVValue
	err := c.Call(ctx, wire.TypeKVGet, &wire.KVRequest{Namespace: namespace, Key: key}, &v)
	return v.Value, err
}

// KVDelete removes a KV config value.
func (c *Conn) KVDelete(ctx context.Context, namespace, key string) error {
	return c.Call(ctx, wire.TypeKVDelete, &wire.KVRequest{Namespace: namespace, Key: key}, nil)
}

// KVList returns a KV namespace.
func (c *Conn) KVList(ctx context.Context, namespace string) (map[string]string, error) {
	var l wire.KVList
	err := c.Call(ctx, wire.TypeKVList, &wire.KVRequest{Namespace: namespace}, &l)
	return l.Entries, err
}

// Leases lists the node's live brokers.
func (c *Conn) Leases(ctx context.Context) ([]wire.LeaseInfo, error) {
	var l wire.LeaseList
	err := c.Call(ctx, wire.TypeLeases, nil, &l)
	return l.Leases, err
}

// PolicyPush uploads a policy module and activates it for a hook (route,
// expiry or confirm) once the node has validated it.
func (c *Conn) PolicyPush(ctx context.Context, hook string, module []byte) (wire.PolicyInfo, error) {
	var info wire.PolicyInfo
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	err := c.Call(ctx, wire.TypePolicyPush, &wire.PolicyPush{Hook: hook, Module: module, TimeoutMs: uploadTimeoutMs(ctx)}, &info)
	return info, err
}

// uploadTimeoutMs tells the node how long the caller waits, less a margin
// for the answer's trip back, so an upload the caller gave up on never
// activates later.
func uploadTimeoutMs(ctx context.Context) int64 {
	deadline, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	d := time.Until(deadline)
	return max((d - min(d/10, time.Second)).Milliseconds(), 1)
}

// PolicyList returns the state of every hook.
func (c *Conn) PolicyList(ctx context.Context) ([]wire.PolicyInfo, error) {
	var l wire.PolicyList
	err := c.Call(ctx, wire.TypePolicyList, nil, &l)
	return l.Policies, err
}

// PolicyRollback restores a hook's previous policy.
func (c *Conn) PolicyRollback(ctx context.Context, hook string) (wire.PolicyInfo, error) {
	var info wire.PolicyInfo
	err := c.Call(ctx, wire.TypePolicyRollback, &wire.PolicyHook{Hook: hook}, &info)
	return info, err
}

// PolicyRemove returns a hook to the built-in behaviour.
func (c *Conn) PolicyRemove(ctx context.Context, hook string) (wire.PolicyInfo, error) {
	var info wire.PolicyInfo
	err := c.Call(ctx, wire.TypePolicyRemove, &wire.PolicyHook{Hook: hook}, &info)
	return info, err
}

// PolicyTest runs a module's hook once on the node, activating nothing.
// input is the hook's CBOR input; nil means the built-in sample.
func (c *Conn) PolicyTest(ctx context.Context, hook string, module, input []byte) (wire.PolicyTestResult, error) {
	var r wire.PolicyTestResult
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	err := c.Call(ctx, wire.TypePolicyTest, &wire.PolicyTest{Hook: hook, Module: module, Input: input, TimeoutMs: uploadTimeoutMs(ctx)}, &r)
	return r, err
}
