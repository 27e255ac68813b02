package registry

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/edgereg/edgereg/wire"
)

// EncodedRoute is a topic's route encoded once as deterministic CBOR (a
// wire.Route) with its version. It is immutable and shared: do not modify
// Body.
type EncodedRoute struct {
	Topic string
	// Version is derived from Body's bytes (the first 8 bytes of its
	// SHA-256), so equal routes have equal versions on every node and a
	// client that fails over can still be answered "not modified". Never 0.
	Version uint64
	Body    []byte
	// groups are the broker groups the route names, sorted by name
	// (a topic's queues are), for AppendFreshness. Their fields are read
	// under the registry's read lock.
	groups []*group
}

// routeCache holds a topic's encoded route; nil means it must be rebuilt.
type routeCache struct{ p atomic.Pointer[EncodedRoute] }

// Route returns a topic's encoded route. An unchanged route is served from
// its cache without allocating.
func (r *Registry) Route(name string) (*EncodedRoute, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t := r.topics[name]
	if t == nil {
		return nil, ErrTopicNotFound
	}
	return r.cachedRoute(t)
}

// cachedRoute returns t's route from its cache, built first if need be.
// Called with mu held for reading at least.
func (r *Registry) cachedRoute(t *topic) (*EncodedRoute, error) {
	if e := t.route.p.Load(); e != nil {
		return e, nil
	}
	// Writers invalidate under mu's write lock, so a route built under the
	// read lock is current until this read lock is released.
	e, err := r.buildRoute(t)
	if err != nil {
		return nil, err
	}
	if !t.route.p.CompareAndSwap(nil, e) {
		e = t.route.p.Load()
	}
	return e, nil
}

// RoutesOf sets routes[i] to the encoded route of topics[i].Topic, as
// Route returns it, or nil where Route would fail: a poll of many topics
// takes the read lock once, not once per topic. routes must be as long as
// topics.
func (r *Registry) RoutesOf(routes []*EncodedRoute, topics []wire.TopicVersion) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for i := range topics {
		routes[i] = nil
		if t := r.topics[topics[i].Topic]; t != nil {
			routes[i], _ = r.cachedRoute(t)
		}
	}
}

// RouteData returns a topic's route decoded.
func (r *Registry) RouteData(name string) (wire.Route, uint64, error) {
	e, err := r.Route(name)
	if err != nil {
		return wire.Route{}, 0, err
	}
	var route wire.Route
	if err := wire.Unmarshal(e.Body, &route); err != nil {
		return wire.Route{}, 0, fmt.Errorf("decode route of %s: %w", name, err)
	}
	return route, e.Version, nil
}

func (r *Registry) buildRoute(t *topic) (*EncodedRoute, error) {
	route := wire.Route{
		Queues:  make([]wire.QueueData, len(t.queues)),
		Brokers: make([]wire.BrokerData, len(t.queues)),
	}
	// The member-group topic is how an acting-master broker learns its
	// group's real members: RocketMQ never re-keys it.
	acting := r.actingMaster && !strings.HasPrefix(t.name, SyncBrokerMemberPrefix)
	for i := range t.queues {
		q := &t.queues[i]
		route.Queues[i] = q.data()
		route.Brokers[i] = q.group.brokerData()
		if acting {
			showActingMaster(&route.Brokers[i], q)
		}
	}
	body, err := wire.Marshal(&route)
	if err != nil {
		return nil, fmt.Errorf("encode route of %s: %w", t.name, err)
	}
	groups := make([]*group, len(t.queues))
	for i := range t.queues {
		groups[i] = t.queues[i].group
	}
	return &EncodedRoute{Topic: t.name, Version: versionOf(body), Body: body, groups: groups}, nil
}

// SyncBrokerMemberPrefix starts the name of the topic each broker of an
// acting-master group registers (TopicValidator.SYNC_BROKER_MEMBER_GROUP_PREFIX
// + its broker name, perm INHERIT). Brokers in RocketMQ's compatible mode
// read their group's members from its route, so its route shows the real
// broker ids, never an acting master under id 0.
const SyncBrokerMemberPrefix = "rmq_sys_SYNC_BROKER_MEMBER_"

// showActingMaster shows a group's lowest-id slave as its master when the
// group has no master, allows acting masters, and the topic is read-only
// there (RocketMQ's pickupTopicRouteData with supportActingMaster; not for
// the topics of SyncBrokerMemberPrefix).
func showActingMaster(b *wire.BrokerData, q *queue) {
	if len(b.Addrs) == 0 || !q.group.actingMaster || q.perm&wire.PermWrite != 0 {
		return
	}
	if _, ok := b.Addrs[wire.MasterID]; ok {
		return
	}
	minID := q.group.minID()
	b.Addrs[wire.MasterID] = b.Addrs[minID]
	delete(b.Addrs, minID)
}

func versionOf(body []byte) uint64 {
	sum := sha256.Sum256(body)
	if v := binary.BigEndian.Uint64(sum[:8]); v != 0 {
		return v
	}
	return 1
}

// changeSet collects the topics whose route a change touched, so their
// caches are dropped once and watchers are told once.
type changeSet struct {
	topics []*topic
	seen   map[*topic]struct{}
}

// grow makes room for n topics in an empty change set, so a registration
// of many new topics does not grow its tables step by step.
func (cs *changeSet) grow(n int) {
	if cs.seen == nil {
		cs.seen = make(map[*topic]struct{}, n)
		cs.topics = slices.Grow(cs.topics, n)
	}
}

func (cs *changeSet) addTopic(t *topic) {
	if cs.seen == nil {
		cs.seen = make(map[*topic]struct{})
	}
	if _, ok := cs.seen[t]; ok {
		return
	}
	cs.seen[t] = struct{}{}
	cs.topics = append(cs.topics, t)
	t.route.p.Store(nil)
}

// addGroup marks every topic of g changed: its broker data is in all of
// their routes.
func (cs *changeSet) addGroup(g *group) {
	for t := range g.topics {
		cs.addTopic(t)
	}
}

func (cs *changeSet) merge(o *changeSet) {
	for _, t := range o.topics {
		cs.addTopic(t)
	}
}

// notify tells OnChange which topics changed. Called without locks held.
func (r *Registry) notify(cs *changeSet) {
	if r.onChange == nil || cs == nil || len(cs.topics) == 0 {
		return
	}
	names := make([]string, len(cs.topics))
	for i, t := range cs.topics {
		names[i] = t.name
	}
	r.onChange(names)
}
