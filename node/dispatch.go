package node

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/edgereg/edgereg/node/kv"
	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
)

// MaxTopicsPerQuery bounds the topics one get-routes, watch or unwatch may
// name.
const MaxTopicsPerQuery = 10_000

// answer is a response as handle makes it: the frame's type and ID, and
// an error, or the routes of a get-routes answer, or any other answer's
// message, which the stream's writer encodes straight into its buffer
// (streamWriter.writeAnswer, appendAnswer in node/encode.go). Frame.Body
// is not used.
type answer struct {
	wire.Frame
	routes *wire.Routes
	set    *routeSet // routes' set, which the stream may reuse once written
	body   any       // the message of an answer other than routes; nil for none
}

func errorAnswer(t wire.Type, id uint64, e *wire.Error) answer {
	return answer{Frame: wire.Frame{Type: t, ID: id, Error: e}}
}

// handle authorizes and answers one request frame.
func (n *Node) handle(cs *connState, f *wire.Frame, w *streamWriter, watch **watcher) answer {
	start := time.Now()
	cs.adm.touch(start)
	if !f.Type.Known() || f.Type == wire.TypeRouteEvent {
		n.stats.badFrames.Inc()
		return errorAnswer(f.Type, f.ID, wire.Errorf(wire.CodeUnknownType, "unknown message type %d", uint16(f.Type)))
	}
	if err := authorize(cs.peer, f.Type); err != nil {
		n.denied(cs, f.Type, err)
		return errorAnswer(f.Type, f.ID, err)
	}
	pool := n.poolFor(cs)
	if f.Type == wire.TypePolicyPush || f.Type == wire.TypePolicyTest {
		// Uploads compile and dry-run a module for up to their deadline
		// (minutes): on the brokers' pool, a few would hold every worker
		// and delay heartbeats into expiries. They have slots of their own,
		// and one that finds none is refused at once rather than queued
		// past its sender's deadline.
		pool = n.policyWorkers
		select {
		case <-n.stop:
			return errorAnswer(f.Type, f.ID, wire.Errorf(wire.CodeUnavailable, "node shutting down: use another node"))
		case pool <- struct{}{}:
		default:
			return errorAnswer(f.Type, f.ID, wire.Errorf(wire.CodeOverloaded,
				"%d policy uploads and tests in progress: retry when one has finished", cap(pool)))
		}
	} else if !n.acquireWorker(pool) {
		return errorAnswer(f.Type, f.ID, wire.Errorf(wire.CodeUnavailable, "node shutting down: use another node"))
	}
	defer func() { <-pool }()
	body, err := n.dispatchRecover(cs, f, w, watch)
	if err != nil {
		we := toWireError(err)
		if we.Code == wire.CodeNotAuthorized {
			n.denied(cs, f.Type, we) // refused for a broker group
		}
		n.stats.observe(f.Type, time.Since(start), we)
		return errorAnswer(f.Type, f.ID, we)
	}
	n.stats.observe(f.Type, time.Since(start), nil)
	a := answer{Frame: wire.Frame{Type: f.Type, ID: f.ID}}
	switch body := body.(type) {
	case nil:
	case *routeSet:
		a.routes, a.set = body.out, body // encoded by the writer: node/encode.go
	default:
		a.body = body // encoded by the writer too, without a buffer of its own
	}
	return a
}

// poolFor returns the worker pool for a connection's requests: brokers and
// operators have one of their own, so readers can never delay a heartbeat.
func (n *Node) poolFor(cs *connState) chan struct{} {
	if classOf(cs.peer) == brokerClass {
		return n.brokerWorkers
	}
	return n.workers
}

// dispatchRecover is dispatch with a panic turned into an internal error
// for this request alone (as CoreDNS's server does): counted, logged with
// the request's kind and the stack, and the node keeps serving.
func (n *Node) dispatchRecover(cs *connState, f *wire.Frame, w *streamWriter, watch **watcher) (body any, err error) {
	defer func() {
		if r := recover(); r != nil {
			n.stats.panics.WithLabelValues(f.Type.String()).Inc()
			n.log.Error("request handler panicked", "kind", f.Type.String(), "id", f.ID,
				"role", cs.peer.role(), "remote", cs.peer.remote, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			body, err = nil, wire.Errorf(wire.CodeInternal, "internal error handling %s: reported in the node's log", f.Type)
		}
	}()
	return n.dispatch(cs, f, w, watch)
}

func (n *Node) acquireWorker(pool chan struct{}) bool {
	select {
	case pool <- struct{}{}: // a free slot, the usual case: no two-channel select
	default:
		select {
		case pool <- struct{}{}:
		case <-n.stop:
			return false
		}
	}
	select {
	case <-n.stop:
		<-pool
		return false
	default:
		return true
	}
}

// testHookDispatch, when set, runs before every request is dispatched;
// tests use it to inject a failing handler.
var testHookDispatch func(*wire.Frame)

// dispatch decodes a request and runs it, returning the response body.
func (n *Node) dispatch(cs *connState, f *wire.Frame, w *streamWriter, watch **watcher) (any, error) {
	if testHookDispatch != nil {
		testHookDispatch(f)
	}
	switch f.Type {
	case wire.TypeRegister:
		var r wire.Register
		if err := f.DecodeRegister(&r); err != nil { // decodeRun's work, without reflection
			return nil, err
		}
		return n.register(cs, &r)
	case wire.TypeUpdateTopics:
		var u wire.UpdateTopics
		if err := f.DecodeUpdateTopics(&u); err != nil { // decodeRun's work, without reflection
			return nil, err
		}
		return n.updateTopics(cs, &u)
	case wire.TypeHeartbeat:
		var h wire.Heartbeat
		if err := f.DecodeHeartbeat(&h); err != nil {
			return nil, err
		}
		return n.heartbeat(cs, &h)
	case wire.TypeUnregister:
		return decodeRun(f, func(u *wire.Unregister) (any, error) { return nil, n.unregister(cs, u) })
	case wire.TypeGetRoutes:
		if err := checkTopicCount(f); err != nil {
			return nil, err
		}
		q := w.getRoutesQuery()
		if err := f.DecodeGetRoutes(q); err != nil { // decodeRun's work, without reflection
			return nil, err
		}
		body, err := n.getRoutes(cs, w, q)
		// Hold none of its strings while the stream idles, but keep its
		// array for the next request's topics, unless a large poll grew
		// it: an idle stream must cost what PROTOCOL.md 4.3 says.
		clear(q.Topics)
		*q = wire.GetRoutes{Topics: q.Topics[:0]}
		if cap(q.Topics) > maxKeptQueryTopics {
			*q = wire.GetRoutes{}
		}
		return body, err
	case wire.TypeClusterInfo:
		return n.reg.ClusterInfo(), nil
	case wire.TypeTopics:
		return decodeRun(f, n.topics)
	case wire.TypeBrokerMemberGroup:
		return decodeRun(f, func(q *wire.MemberGroupQuery) (any, error) {
			if err := errors.Join(registry.ValidName("cluster name", q.Cluster), registry.ValidName("broker name", q.BrokerName)); err != nil {
				return nil, err
			}
			return n.reg.BrokerMemberGroup(q.Cluster, q.BrokerName)
		})
	case wire.TypeWatch:
		if err := checkTopicCount(f); err != nil {
			return nil, err
		}
		return decodeRun(f, func(q *wire.Watch) (any, error) { return n.watch(cs, w, watch, q) })
	case wire.TypeUnwatch:
		if err := checkTopicCount(f); err != nil {
			return nil, err
		}
		return decodeRun(f, func(q *wire.Unwatch) (any, error) { return n.unwatch(cs, *watch, q) })
	case wire.TypePing:
		return wire.Pong{NodeID: n.id, StartedMs: n.started.UnixMilli(), WarmingUp: n.WarmingUp(), Version: Version}, nil
	}
	return n.dispatchAdmin(cs, f)
}

func (n *Node) dispatchAdmin(cs *connState, f *wire.Frame) (any, error) {
	switch f.Type {
	case wire.TypeDeleteTopic:
		return decodeRun(f, func(d *wire.DeleteTopic) (any, error) {
			if err := validDeleteTopic(d); err != nil {
				return nil, err
			}
			err := n.reg.DeleteTopic(d.Topic, d.Clusters...)
			if err == nil {
				n.audit(cs, "topic deleted", "topic", d.Topic, "clusters", d.Clusters)
			}
			return nil, err
		})
	case wire.TypeWipeWritePerm, wire.TypeAddWritePerm:
		return decodeRun(f, func(p *wire.PermRequest) (any, error) { return n.perm(cs, f.Type, p) })
	case wire.TypeKVPut:
		return decodeRun(f, func(r *wire.KVRequest) (any, error) {
			err := n.kv.Put(r.Namespace, r.Key, r.Value)
			if err == nil {
				n.audit(cs, "kv put", "namespace", r.Namespace, "key", r.Key, "value_bytes", len(r.Value))
			}
			return nil, err
		})
	case wire.TypeKVGet:
		return decodeRun(f, func(r *wire.KVRequest) (any, error) {
			v, err := n.kv.Get(r.Namespace, r.Key)
			return wire.KVValue{Value: v}, err
		})
	case wire.TypeKVDelete:
		return decodeRun(f, func(r *wire.KVRequest) (any, error) {
			err := n.kv.Delete(r.Namespace, r.Key)
			if err == nil {
				n.audit(cs, "kv deleted", "namespace", r.Namespace, "key", r.Key)
			}
			return nil, err
		})
	case wire.TypeKVList:
		return decodeRun(f, func(r *wire.KVRequest) (any, error) {
			m, err := n.kv.List(r.Namespace)
			return wire.KVList{Entries: m}, err
		})
	case wire.TypeLeases:
		return n.leases(), nil
	case wire.TypeNodeInfo:
		return n.nodeInfo(), nil // node/info.go
	}
	return n.dispatchPolicy(cs, f)
}

// checkTopicCount refuses a get-routes, watch or unwatch whose topics array
// declares more than MaxTopicsPerQuery elements, before its body is
// decoded: a million one-byte elements would otherwise decode to 24 MiB.
func checkTopicCount(f *wire.Frame) error {
	if n, ok := wire.ArrayLen(f.Body, 1); ok && n > MaxTopicsPerQuery {
		return topicCountError(f.Type, int(min(n, 1<<31)))
	}
	return nil
}

// topicCountError is the answer to a get-routes or watch naming n topics,
// none or too many, and to an unwatch naming too many.
func topicCountError(t wire.Type, n int) error {
	if t == wire.TypeUnwatch {
		return wire.Errorf(wire.CodeBadRequest, "unwatch names %d topics, more than %d", n, MaxTopicsPerQuery)
	}
	if t == wire.TypeWatch {
		return wire.Errorf(wire.CodeBadRequest, "watch names %d topics: give 1 to %d", n, MaxTopicsPerQuery)
	}
	if n == 0 {
		return wire.Errorf(wire.CodeBadRequest, "get-routes names no topic")
	}
	return wire.Errorf(wire.CodeBadRequest, "get-routes names %d topics, more than %d", n, MaxTopicsPerQuery)
}

// decodeRun decodes a frame's body into a new T and runs fn on it.
func decodeRun[T any](f *wire.Frame, fn func(*T) (any, error)) (any, error) {
	var req T
	if err := f.DecodeBody(&req); err != nil {
		return nil, err
	}
	return fn(&req)
}

func (n *Node) register(cs *connState, r *wire.Register) (any, error) {
	reg := toRegistration(r)
	if err := reg.Validate(); err != nil {
		return nil, err // invalid before unauthorized: an empty name is code 1
	}
	if err := authorizeRegister(cs.peer, &reg); err != nil {
		return nil, err
	}
	old, existed := n.reg.Lease(r.Cluster, r.Addr)
	res, err := n.reg.Register(reg)
	if err != nil {
		return nil, err
	}
	if existed && old.BrokerName != r.BrokerName {
		n.log.Info("broker address moved to another group", "cluster", r.Cluster, "addr", r.Addr,
			"from", old.BrokerName, "to", r.BrokerName, "epoch", res.Epoch, "remote", cs.peer.remote)
	}
	n.stats.registrations.Inc()
	n.adm.holdSession(cs.adm, r.Cluster, r.Addr) // admission.go: a live broker is never replaced
	if !existed {
		n.log.Info("broker registered", "cluster", r.Cluster, "broker", r.BrokerName, "id", r.BrokerID,
			"addr", r.Addr, "topics", len(r.Topics), "epoch", res.Epoch, "remote", cs.peer.remote)
	}
	return wire.RegisterAck{
		Lease:      n.leaseAck(res.Lease),
		MasterAddr: res.MasterAddr, MasterHAAddr: res.MasterHAAddr,
	}, nil
}

func toRegistration(r *wire.Register) registry.Registration {
	return registry.Registration{
		Cluster: r.Cluster, BrokerName: r.BrokerName, BrokerID: r.BrokerID, Addr: r.Addr,
		HAAddr: r.HAAddr, Zone: r.Zone, ActingMaster: r.ActingMaster, DataVersion: r.DataVersion,
		Topics: r.Topics, HeartbeatTimeout: time.Duration(r.HeartbeatTimeoutMs) * time.Millisecond,
	}
}

// testHookLeaseChecked runs right after authorizeLease looked the lease
// up; tests use it to interleave a registration there.
var testHookLeaseChecked atomic.Pointer[func()]

// authorizeLease checks that a broker acts for a lease of a group its
// certificate names, and binds the request to the lease it checked: an
// address without a lease, or a lease of another epoch, is refused here,
// before the registry is asked. Otherwise a lease registered between this
// lookup and the registry's (epochs are sequential, so guessable) would be
// acted on unchecked. The registry checks the epoch again, and an epoch
// names one registration, hence one group.
func (n *Node) authorizeLease(cs *connState, cluster, addr string, epoch uint64) (registry.LeaseInfo, error) {
	l, ok := n.reg.Lease(cluster, addr)
	if hook := testHookLeaseChecked.Load(); hook != nil {
		(*hook)()
	}
	if !ok {
		return l, fmt.Errorf("%w: broker %s of cluster %q is not registered: register first", registry.ErrLeaseNotFound, addr, cluster)
	}
	if err := authorizeGroup(cs.peer, l.BrokerName); err != nil {
		return l, err
	}
	if l.Epoch != epoch {
		return l, fmt.Errorf("%w: epoch %d, current %d", registry.ErrStaleEpoch, epoch, l.Epoch)
	}
	return l, nil
}

func (n *Node) updateTopics(cs *connState, u *wire.UpdateTopics) (any, error) {
	tu := registry.TopicUpdate{
		Cluster: u.Cluster, Addr: u.Addr, Epoch: u.Epoch, DataVersion: u.DataVersion,
		Upsert: u.Upsert, Remove: u.Remove,
	}
	if err := tu.Validate(); err != nil {
		return nil, err // invalid before unauthorized, as for register
	}
	if _, err := n.authorizeLease(cs, u.Cluster, u.Addr, u.Epoch); err != nil {
		return nil, err
	}
	l, err := n.reg.UpdateTopics(tu)
	if err != nil {
		return nil, err
	}
	return n.leaseAck(l), nil
}

func (n *Node) heartbeat(cs *connState, h *wire.Heartbeat) (any, error) {
	if err := validLeaseName(h.Cluster, h.Addr); err != nil {
		return nil, err // invalid before unauthorized, as for register
	}
	if _, err := n.authorizeLease(cs, h.Cluster, h.Addr, h.Epoch); err != nil {
		return nil, err
	}
	l, err := n.reg.Heartbeat(h.Cluster, h.Addr, h.Epoch, h.DataVersion)
	if err != nil {
		return nil, err
	}
	n.stats.heartbeats.Inc()
	n.adm.holdSession(cs.adm, h.Cluster, h.Addr)
	return n.leaseAck(l), nil
}

func (n *Node) unregister(cs *connState, u *wire.Unregister) error {
	if err := validLeaseName(u.Cluster, u.Addr); err != nil {
		return err
	}
	l, err := n.authorizeLease(cs, u.Cluster, u.Addr, u.Epoch)
	if err != nil {
		return err
	}
	if err := n.reg.Unregister(u.Cluster, u.Addr, u.Epoch); err != nil {
		return err
	}
	n.log.Info("broker unregistered", "cluster", u.Cluster, "broker", l.BrokerName, "addr", u.Addr, "epoch", u.Epoch)
	return nil
}

// leaseAck answers a register, heartbeat or update, telling the broker the
// node's heartbeat interval and the lease's threshold, so that a broker
// configured for slower heartbeats follows the node instead of expiring.
func (n *Node) leaseAck(l registry.Lease) wire.LeaseAck {
	ack := wire.LeaseAck{Epoch: l.Epoch, DeadlineMs: l.Deadline.UnixMilli(), VersionChanged: l.VersionChanged,
		HeartbeatIntervalMs: uint64(n.cfg.HeartbeatInterval.Milliseconds())}
	if l.Threshold > 0 {
		ack.ThresholdMs = uint64(l.Threshold.Milliseconds())
	}
	return ack
}

// getRoutes answers a get-routes request with a *routeSet, reusing the
// one w kept from the stream's last read when it is large enough.
func (n *Node) getRoutes(cs *connState, w *streamWriter, q *wire.GetRoutes) (any, error) {
	if len(q.Topics) == 0 || len(q.Topics) > MaxTopicsPerQuery {
		return nil, topicCountError(wire.TypeGetRoutes, len(q.Topics))
	}
	for _, tv := range q.Topics {
		if err := registry.ValidTopicName(tv.Topic); err != nil {
			return nil, err // code 1, as watch answers
		}
	}
	rs := w.takeRouteSet(len(q.Topics)) // node/encode.go
	// One registry read for all topics: rs.entries holds their routes
	// until routeRead leaves there only those it answers unfiltered.
	n.reg.RoutesOf(rs.entries, q.Topics)
	ctx := n.policies.readContext(n.cfg.PolicyReadBudget) // node/policy.go
	if n.policies.parallel(len(q.Topics)) {
		// The closure takes copies, so that it does not keep q, which
		// dispatch empties once the answer is built.
		topics, client, ip := q.Topics, q.Client, cs.peer.ip
		n.policies.eachTopic(len(topics), func(i int) {
			rs.out.Results[i], rs.entries[i] = n.routeRead(ctx, topics[i], rs.entries[i], ip, client)
		})
	} else {
		for i := range q.Topics {
			rs.out.Results[i], rs.entries[i] = n.routeRead(ctx, q.Topics[i], rs.entries[i], cs.peer.ip, q.Client)
		}
	}
	n.stats.countRouteReads(rs.out.Results)
	n.describeRoutes(rs) // freshness: node/info.go
	return rs, nil
}

// routeRead answers one topic of a poll or a watch for a client at ip
// with attrs, as the active route policy lets that client see it: for the
// registry's route e of tv's topic (nil when it has none) within ctx's
// policy budget, not counted in the route read metrics (the caller
// counts its results). It also returns e when the
// result is that route unfiltered (modified or not), nil otherwise, so
// describeRoutes need not look it up again.
func (n *Node) routeRead(ctx context.Context, tv wire.TopicVersion, e *registry.EncodedRoute, ip string, attrs wire.ClientAttrs) (wire.RouteResult, *registry.EncodedRoute) {
	switch {
	case e == nil && n.WarmingUp():
		return wire.RouteResult{Topic: tv.Topic, Status: wire.StatusWarmingUp}, nil
	case e == nil:
		return wire.RouteResult{Topic: tv.Topic, Status: wire.StatusNotFound}, nil
	}
	// The registry's own copy of the name goes to the policy, whose memo
	// keeps it: tv.Topic may be a substring of a whole request
	// (Frame.DecodeGetRoutes), which the memo must not pin.
	body, version, err := n.policies.filter(ctx, ip, attrs, e.Topic, e.Version, e.Body)
	if err != nil { // the route policy failed closed
		return wire.RouteResult{Topic: tv.Topic, Status: wire.StatusPolicyFailed}, nil
	}
	// A policy that changes a route gives it another version (a hash of
	// its bytes): the same version is the registry's route.
	if version != e.Version {
		e = nil
	}
	if version == tv.Version {
		return wire.RouteResult{Topic: tv.Topic, Status: wire.StatusNotModified, Version: version}, e
	}
	return wire.RouteResult{Topic: tv.Topic, Status: wire.StatusOK, Version: version, Route: body}, e
}

func (n *Node) topics(q *wire.TopicsQuery) (any, error) {
	var ts []string
	var err error
	switch q.Kind {
	case wire.TopicsAll:
		ts = n.reg.Topics()
	case wire.TopicsByCluster:
		if err := registry.ValidName("cluster name", q.Cluster); err != nil {
			return nil, err
		}
		ts, err = n.reg.TopicsByCluster(q.Cluster)
	case wire.TopicsSystem:
		ts = n.reg.SystemTopics()
	case wire.TopicsUnit:
		ts = n.reg.UnitTopics()
	case wire.TopicsUnitSub:
		ts = n.reg.UnitSubTopics()
	case wire.TopicsUnitSubWithoutUnit:
		ts = n.reg.UnitSubNonUnitTopics()
	default:
		return nil, wire.Errorf(wire.CodeBadRequest, "unknown topic list kind %d", q.Kind)
	}
	if ts == nil {
		ts = []string{}
	}
	return wire.TopicList{Topics: ts}, err
}

func (n *Node) perm(cs *connState, t wire.Type, p *wire.PermRequest) (any, error) {
	if err := registry.ValidName("broker name", p.BrokerName); err != nil {
		return nil, err
	}
	var changed int
	var err error
	if t == wire.TypeWipeWritePerm {
		changed, err = n.reg.WipeWritePerm(p.BrokerName)
	} else {
		changed, err = n.reg.AddWritePerm(p.BrokerName)
	}
	if err != nil {
		return nil, err
	}
	n.audit(cs, "write permission changed", "broker", p.BrokerName, "action", t.String(), "topics", changed)
	return wire.PermResult{Changed: changed}, nil
}

// validLeaseName checks the (Cluster, Addr) a heartbeat or unregister
// names: a name no registration could have used is a bad request (code 1),
// not a missing lease (code 7), as PROTOCOL.md section 8 says of every name.
func validLeaseName(cluster, addr string) error {
	return errors.Join(registry.ValidName("cluster name", cluster), registry.ValidAddr("broker address", addr))
}

// validDeleteTopic checks the names a delete-topic uses, so an invalid one
// gets code 1 rather than "not found".
func validDeleteTopic(d *wire.DeleteTopic) error {
	if err := registry.ValidTopicName(d.Topic); err != nil {
		return err
	}
	for _, c := range d.Clusters {
		if err := registry.ValidName("cluster name", c); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) leases() wire.LeaseList {
	ls := n.reg.Leases()
	out := wire.LeaseList{Leases: make([]wire.LeaseInfo, len(ls))}
	for i, l := range ls {
		out.Leases[i] = wire.LeaseInfo{
			Cluster: l.Cluster, Addr: l.Addr, BrokerName: l.BrokerName, BrokerID: l.BrokerID,
			Zone: l.Zone, Epoch: l.Epoch, DataVersion: l.DataVersion,
			LastHeartbeatMs: l.LastHeartbeat.UnixMilli(), DeadlineMs: l.Deadline.UnixMilli(),
			ThresholdMs: l.Threshold.Milliseconds(), Heartbeats: l.Heartbeats,
		}
	}
	return out
}

// toWireError maps an error to the code a peer can branch on, keeping the
// message a person can act on.
func toWireError(err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	codes := []struct {
		target error
		code   wire.Code
	}{
		{registry.ErrTopicNotFound, wire.CodeNotFound},
		{registry.ErrClusterNotFound, wire.CodeNotFound},
		{registry.ErrBrokerGroupNotFound, wire.CodeNotFound},
		{kv.ErrNotFound, wire.CodeNotFound},
		{registry.ErrLeaseNotFound, wire.CodeLeaseNotFound},
		{registry.ErrStaleEpoch, wire.CodeStaleEpoch},
		{registry.ErrStaleState, wire.CodeStaleState},
		{registry.ErrConflict, wire.CodeConflict},
		{registry.ErrNotGroupLeader, wire.CodeNotGroupLeader},
		{registry.ErrInvalid, wire.CodeBadRequest},
		{kv.ErrInvalid, wire.CodeBadRequest},
	}
	for _, c := range codes {
		if errors.Is(err, c.target) {
			return &wire.Error{Code: c.code, Message: err.Error()}
		}
	}
	return &wire.Error{Code: wire.CodeInternal, Message: err.Error()}
}
