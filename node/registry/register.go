package registry

import (
	"fmt"
	"strings"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// Registration is one full registration of a broker (RocketMQ's
// registerBroker), sent at start, after a reconnect, and whenever a node says
// the broker's data version differs from the one it holds.
type Registration struct {
	Cluster    string
	BrokerName string // the broker group
	BrokerID   int64  // wire.MasterID for the master
	Addr       string // host:port; one address is one broker id
	HAAddr     string // where slaves replicate from this broker
	Zone       string
	// ActingMaster is the broker's enableActingMaster: when its group has no
	// master, its lowest-id slave is shown as the master (id 0) of its
	// read-only topics. (The lowest-id slave's topics are served read-only
	// whenever the group has no master, with or without this flag.)
	ActingMaster bool
	DataVersion  wire.DataVersion
	// Topics is the broker's full topic configuration. From the group's
	// master (or acting master) it replaces what the group held: topics it
	// does not name are removed from the group.
	Topics []wire.TopicConfig
	// HeartbeatTimeout is how long the broker asks to stay registered without
	// a heartbeat; zero means the registry's default. It is clamped to the
	// registry's MinThreshold and MaxThreshold.
	HeartbeatTimeout time.Duration
	// MayMove, when set, is asked before Addr is taken out of another broker
	// group that holds a lease on it (an address is one broker: it leaves
	// its old group). An error refuses the registration and is returned as
	// it is. It is called with the registry's locks held: it must be fast
	// and must not call back into the Registry.
	MayMove func(fromGroup string) error
}

// Validate reports the first invalid field of a registration; the error
// wraps ErrInvalid. Register validates too; callers that must check
// validity before authorizing call it first.
func (reg *Registration) Validate() error {
	return validateRegistration(reg)
}

// Lease is what a broker learns when its registration or heartbeat is
// acknowledged.
type Lease struct {
	Epoch    uint64
	Deadline time.Time
	// VersionChanged is set on a heartbeat when the data version the node
	// holds differs from the broker's: the broker should register in full.
	VersionChanged bool
	// Threshold is how long the lease may now go without a heartbeat
	// (LeaseInfo.Threshold), so that an answer needs no second lookup.
	Threshold time.Duration
}

// grant is what a broker learns of its lease l, as of the clock reading
// rd. With leaseMu held.
func (l *lease) grant(rd reading) Lease {
	return Lease{Epoch: l.epoch, Deadline: rd.wallOf(l.deadline), Threshold: l.threshold}
}

// RegisterResult is the outcome of a registration.
type RegisterResult struct {
	Lease
	// MasterAddr and MasterHAAddr tell a slave where its master is, when the
	// master is registered.
	MasterAddr   string
	MasterHAAddr string
}

// Register records a full registration and starts or renews the broker's
// lease with a new epoch.
func (r *Registry) Register(reg Registration) (RegisterResult, error) {
	if err := validateRegistration(&reg); err != nil {
		return RegisterResult{}, fmt.Errorf("register %s: %w", reg.Addr, err)
	}
	r.mu.Lock()
	changed, res, err := r.register(&reg)
	r.mu.Unlock()
	if err != nil {
		return RegisterResult{}, fmt.Errorf("register %s: %w", reg.Addr, err)
	}
	r.notify(changed)
	return res, nil
}

func (r *Registry) register(reg *Registration) (*changeSet, RegisterResult, error) {
	g := r.groups[reg.BrokerName]
	if g != nil && g.cluster != reg.Cluster {
		return nil, RegisterResult{}, wrapf(ErrConflict, "broker group %q belongs to cluster %q, not %q", g.name, g.cluster, reg.Cluster)
	}
	key := leaseKey{reg.Cluster, reg.Addr}
	if err := r.checkState(g, reg); err != nil {
		return nil, RegisterResult{}, err
	}
	if err := checkGroupSize(g, reg); err != nil {
		return nil, RegisterResult{}, err
	}
	if err := r.mayMove(key, reg); err != nil {
		return nil, RegisterResult{}, err
	}
	cs := &changeSet{}
	r.detachFromOtherGroup(key, reg.BrokerName, cs)
	first := g == nil
	if first {
		g = r.addGroup(reg.Cluster, reg.BrokerName)
	}
	membersChanged := r.placeMember(g, reg, cs)
	first = first || membersChanged.newID
	if g.zone != reg.Zone || g.actingMaster != reg.ActingMaster {
		g.zone, g.actingMaster = reg.Zone, reg.ActingMaster
		membersChanged.any = true
	}
	if membersChanged.any {
		cs.addGroup(g)
	}

	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	old := r.leases[key]
	configChanged := first || old == nil || old.version != reg.DataVersion
	isMaster := reg.BrokerID == wire.MasterID
	if configChanged && (isMaster || g.isPrime(reg.BrokerID)) {
		r.applyTopics(g, reg.Topics, !isMaster, cs)
	}
	rd := r.read()
	l := r.renewLease(key, old, reg, rd)
	res := RegisterResult{Lease: l.grant(rd)}
	if !isMaster {
		if addr, ok := g.addrs[wire.MasterID]; ok {
			if m := r.leases[leaseKey{reg.Cluster, addr}]; m != nil {
				res.MasterAddr, res.MasterHAAddr = addr, m.haAddr
			}
		}
	}
	return cs, res, nil
}

// detachFromOtherGroup takes an address that registers under a new broker
// name out of the group it was in: its lease there ends and the old group
// loses the member, as if that broker had unregistered. Otherwise the old
// group would keep a member with no lease behind it, served forever. Who may
// move an address is decided by the caller (the node checks that the
// peer may act for the old group too).
func (r *Registry) detachFromOtherGroup(key leaseKey, name string, cs *changeSet) {
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	if old := r.leases[key]; old != nil && old.brokerName != name {
		cs.merge(r.removeLease(old))
	}
}

// mayMove asks reg.MayMove whether the address may leave the other group
// that holds its lease.
func (r *Registry) mayMove(key leaseKey, reg *Registration) error {
	if reg.MayMove == nil {
		return nil
	}
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	if old := r.leases[key]; old != nil && old.brokerName != reg.BrokerName {
		return reg.MayMove(old.brokerName)
	}
	return nil
}

// checkState refuses a registration that would move a broker id to a new
// address while the broker at the old address holds a newer state
// (RocketMQ's stateVersion check).
func (r *Registry) checkState(g *group, reg *Registration) error {
	if g == nil {
		return nil
	}
	oldAddr, ok := g.addrs[reg.BrokerID]
	if !ok || oldAddr == reg.Addr {
		return nil
	}
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	if old := r.leases[leaseKey{reg.Cluster, oldAddr}]; old != nil && old.version.State > reg.DataVersion.State {
		return wrapf(ErrStaleState, "broker id %d of %q is at %s with state %d, newer than %d",
			reg.BrokerID, g.name, oldAddr, old.version.State, reg.DataVersion.State)
	}
	return nil
}

// MaxBrokersPerGroup bounds the broker ids one group holds. RocketMQ
// groups are a master and a few slaves; without a bound, one broker
// credential could register ids without end, and every registration of
// the group grows with its members.
const MaxBrokersPerGroup = 64

// checkGroupSize refuses a registration that would give a full group
// (MaxBrokersPerGroup ids) one more id. A member re-registering, or moving
// to another id or address, adds none.
func checkGroupSize(g *group, reg *Registration) error {
	if g == nil || len(g.addrs) < MaxBrokersPerGroup {
		return nil
	}
	if _, ok := g.addrs[reg.BrokerID]; ok {
		return nil
	}
	for _, a := range g.addrs {
		if a == reg.Addr {
			return nil
		}
	}
	return wrapf(ErrConflict, "broker group %q holds %d broker ids, the most a group may: broker id %d is refused",
		g.name, MaxBrokersPerGroup, reg.BrokerID)
}

type memberChange struct {
	any   bool // the group's members changed
	newID bool // the broker id had no address before
}

// placeMember puts reg.Addr at reg.BrokerID, first removing the address from
// any other id (one address is one broker id) and dropping the lease of the
// address the id had before.
func (r *Registry) placeMember(g *group, reg *Registration, cs *changeSet) memberChange {
	var mc memberChange
	lostMaster := false
	for id, a := range g.addrs {
		if a == reg.Addr && id != reg.BrokerID {
			delete(g.addrs, id)
			mc.any = true
			lostMaster = lostMaster || id == wire.MasterID
		}
	}
	if lostMaster {
		// The master re-registered as a slave: the group has no master
		// now, and nobody can write to it (as when the master leaves).
		defer r.wipeWrite(g, cs)
	}
	oldAddr, had := g.addrs[reg.BrokerID]
	if had && oldAddr != reg.Addr {
		r.leaseMu.Lock()
		r.dropLease(leaseKey{reg.Cluster, oldAddr})
		r.leaseMu.Unlock()
	}
	if !had || oldAddr != reg.Addr {
		g.addrs[reg.BrokerID] = reg.Addr
		mc.any = true
	}
	mc.newID = !had
	return mc
}

func (r *Registry) addGroup(clusterName, name string) *group {
	c := r.clusters[clusterName]
	if c == nil {
		c = &cluster{name: clusterName, groups: make(map[string]*group)}
		r.clusters[clusterName] = c
	}
	g := &group{cluster: clusterName, name: name, addrs: make(map[int64]string, 2), topics: make(map[*topic]uint32)}
	c.groups[name] = g
	r.groups[name] = g
	return g
}

// applyTopics makes topics the group's full topic set: each is created or
// updated, and every topic of the group that is not named is removed from
// it. Generations mark what this registration named, so no set is built.
// A topic an operator deleted from the group stays deleted while the
// broker's full registrations still name it; the first one that omits it
// ends the tombstone.
//
// A broker re-sends its full registration whenever its data version
// changes, mostly with the same topics: when sameTopics finds the group
// holds exactly what topics would leave it, nothing is touched (no route
// cache dropped, no watcher told).
func (r *Registry) applyTopics(g *group, topics []wire.TopicConfig, readOnly bool, cs *changeSet) {
	if !r.alwaysApply && g.sameTopics(topics, readOnly) {
		return
	}
	g.gen++
	if len(g.topics) == 0 {
		// A new group (or one that had none): every topic is new to it, so
		// size its table and the change set once instead of step by step.
		g.topics = make(map[*topic]uint32, len(topics))
		cs.grow(len(topics))
	}
	if cap(g.applied) < len(topics) || cap(g.applied) > 2*len(topics) {
		g.applied = make([]*topic, 0, len(topics)) // no growth slack: one pointer per entry
	}
	g.applied = g.applied[:0]
	var kept map[string]struct{} // tombstones this registration still names
	for i := range topics {
		tc := topics[i]
		if _, gone := g.deleted[tc.Name]; gone {
			if kept == nil {
				kept = make(map[string]struct{}, len(g.deleted))
			}
			kept[strings.Clone(tc.Name)] = struct{}{}
			continue
		}
		if readOnly {
			tc.Perm &^= wire.PermWrite // a prime slave serves reads only
		}
		t := r.upsertQueue(g, &tc, cs)
		g.topics[t] = g.gen
		g.applied = append(g.applied, t)
	}
	for t, gen := range g.topics {
		if gen != g.gen {
			r.removeQueue(t, g, cs)
		}
	}
	if len(kept) == 0 {
		kept = nil
	}
	g.deleted = kept
	g.appliedCount = len(g.topics)
	if kept != nil || len(g.applied) == 0 {
		g.applied = nil
	}
}

// sameTopics reports whether applying topics would change nothing: the
// same names in the same order as the last full registration applied, each
// topic still holding the group's queue data exactly as topics gives it,
// the group holding no other topic, and no tombstone. It needs no map
// lookup and no hook in the other writers (updates, deletions, permission
// changes): it compares with the live queue data, and a topic the group no
// longer holds has no queue data of the group.
func (g *group) sameTopics(topics []wire.TopicConfig, readOnly bool) bool {
	if len(topics) == 0 || len(g.applied) != len(topics) || g.deleted != nil || len(g.topics) != g.appliedCount {
		return false
	}
	for i := range topics {
		tc, t := &topics[i], g.applied[i]
		if t.name != tc.Name {
			return false
		}
		j, found := 0, len(t.queues) > 0 && t.queues[0].group == g // most topics: one group
		if !found {
			if j, found = t.find(g); !found {
				return false
			}
		}
		perm := tc.Perm
		if readOnly {
			perm &^= wire.PermWrite
		}
		if t.queues[j] != (queue{group: g, read: tc.ReadQueues, write: tc.WriteQueues, perm: perm, sysFlag: tc.SysFlag}) {
			return false
		}
	}
	return true
}

// upsertQueue creates or updates g's queue data in a topic, creating the
// topic if needed.
func (r *Registry) upsertQueue(g *group, tc *wire.TopicConfig, cs *changeSet) *topic {
	t := r.topics[tc.Name]
	if t == nil {
		// A name of its own: a decoded registration's names share one
		// copy of the request (wire.Frame.DecodeRegister).
		t = &topic{name: strings.Clone(tc.Name)}
		r.topics[t.name] = t
	}
	q := queue{group: g, read: tc.ReadQueues, write: tc.WriteQueues, perm: tc.Perm, sysFlag: tc.SysFlag}
	i, found := t.find(g)
	switch {
	case !found:
		t.queues = insertAt(t.queues, i, q)
	case t.queues[i] == q:
		return t
	default:
		t.queues[i] = q
	}
	cs.addTopic(t)
	return t
}

// removeQueue removes g's queue data from t, and t itself when it is left
// empty.
func (r *Registry) removeQueue(t *topic, g *group, cs *changeSet) {
	delete(g.topics, t)
	i, found := t.find(g)
	if !found {
		return
	}
	t.queues = deleteAt(t.queues, i)
	cs.addTopic(t)
	if len(t.queues) == 0 {
		delete(r.topics, t.name)
	}
}

// TopicUpdate is an incremental change to a registered broker's topics.
type TopicUpdate struct {
	Cluster string
	Addr    string
	Epoch   uint64
	// DataVersion is the broker's version after this change; the node
	// stores it so the next heartbeat does not ask for a full registration.
	DataVersion wire.DataVersion
	Upsert      []wire.TopicConfig
	Remove      []string
}

// Validate reports the first invalid field of a topic update; the error
// wraps ErrInvalid. UpdateTopics validates too; callers that must check
// validity before authorizing call it first.
func (u *TopicUpdate) Validate() error { return validateTopicUpdate(u) }

// UpdateTopics applies an incremental topic change from the master (or the
// acting master) of a group, and renews its lease.
func (r *Registry) UpdateTopics(u TopicUpdate) (Lease, error) {
	if err := validateTopicUpdate(&u); err != nil {
		return Lease{}, fmt.Errorf("update topics of %s: %w", u.Addr, err)
	}
	r.mu.Lock()
	cs, l, err := r.updateTopics(&u)
	r.mu.Unlock()
	if err != nil {
		return Lease{}, fmt.Errorf("update topics of %s: %w", u.Addr, err)
	}
	r.notify(cs)
	return l, nil
}

func (r *Registry) updateTopics(u *TopicUpdate) (*changeSet, Lease, error) {
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	l, err := r.currentLease(leaseKey{u.Cluster, u.Addr}, u.Epoch)
	if err != nil {
		return nil, Lease{}, err
	}
	g := r.groups[l.brokerName]
	acting := g.isPrime(l.brokerID)
	if l.brokerID != wire.MasterID && !acting {
		return nil, Lease{}, wrapf(ErrNotGroupLeader, "broker id %d of %q", l.brokerID, g.name)
	}
	cs := &changeSet{}
	for i := range u.Upsert {
		tc := u.Upsert[i]
		if acting {
			tc.Perm &^= wire.PermWrite
		}
		delete(g.deleted, tc.Name) // created again on the broker
		t := r.upsertQueue(g, &tc, cs)
		g.topics[t] = g.gen
	}
	for _, name := range u.Remove {
		delete(g.deleted, name)
		if t := r.topics[name]; t != nil {
			r.removeQueue(t, g, cs)
		}
	}
	l.version = u.DataVersion
	rd := r.read()
	r.touch(l, rd)
	return cs, l.grant(rd), nil
}

// Heartbeat renews a broker's lease. The result says whether the data
// version the node holds differs from the broker's.
func (r *Registry) Heartbeat(clusterName, addr string, epoch uint64, v wire.DataVersion) (Lease, error) {
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	l, err := r.currentLease(leaseKey{clusterName, addr}, epoch)
	if err != nil {
		return Lease{}, fmt.Errorf("heartbeat from %s: %w", addr, err)
	}
	rd := r.read()
	r.touch(l, rd)
	granted := l.grant(rd)
	granted.VersionChanged = l.version != v
	return granted, nil
}

// Unregister removes a broker (RocketMQ's unregisterBroker, by address), but
// only the registration of the given epoch: a late unregister cannot remove
// a newer registration.
func (r *Registry) Unregister(clusterName, addr string, epoch uint64) error {
	r.mu.Lock()
	r.leaseMu.Lock()
	l, err := r.currentLease(leaseKey{clusterName, addr}, epoch)
	var cs *changeSet
	if err == nil {
		cs = r.removeLease(l)
	}
	r.leaseMu.Unlock()
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("unregister %s: %w", addr, err)
	}
	r.notify(cs)
	return nil
}

func (r *Registry) currentLease(key leaseKey, epoch uint64) (*lease, error) {
	l := r.leases[key]
	if l == nil {
		return nil, wrapf(ErrLeaseNotFound, "broker %s of cluster %q is not registered: register first", key.addr, key.cluster)
	}
	if l.epoch != epoch {
		return nil, wrapf(ErrStaleEpoch, "epoch %d, current %d", epoch, l.epoch)
	}
	return l, nil
}

// removeLease drops a lease and its broker from its group; a group left
// empty disappears with its queue data. With mu and leaseMu held.
func (r *Registry) removeLease(l *lease) *changeSet {
	r.dropLease(l.key)
	cs := &changeSet{}
	g := r.groups[l.brokerName]
	if g == nil {
		return cs
	}
	id, ok := g.idOf(l.key.addr)
	if !ok {
		return cs
	}
	delete(g.addrs, id)
	if len(g.addrs) == 0 {
		r.removeGroup(g, cs)
		return cs
	}
	cs.addGroup(g)
	if id == wire.MasterID {
		// The master is gone: its queues stay readable from the slaves but
		// become read-only until it returns (RocketMQ's
		// cleanTopicByUnRegisterRequests, for every group: nobody can
		// write to a group without a master).
		r.wipeWrite(g, cs)
	}
	return cs
}

func (r *Registry) removeGroup(g *group, cs *changeSet) {
	for t := range g.topics {
		r.removeQueue(t, g, cs)
	}
	delete(r.groups, g.name)
	if c := r.clusters[g.cluster]; c != nil {
		delete(c.groups, g.name)
		if len(c.groups) == 0 {
			delete(r.clusters, c.name)
		}
	}
}

func insertAt[T any](s []T, i int, v T) []T {
	var zero T
	s = append(s, zero)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

func deleteAt[T any](s []T, i int) []T {
	copy(s[i:], s[i+1:])
	var zero T
	s[len(s)-1] = zero
	return s[:len(s)-1]
}
