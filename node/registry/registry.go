// Package registry holds a node's route tables in memory: clusters, broker
// groups, topics and the leases of live brokers, with the rules of Apache
// RocketMQ's NameServer (RouteInfoManager) and without its known flaws.
//
// What is kept from the NameServer:
//   - topic configuration is accepted only from a group's master, or, read-only,
//     from its lowest-id slave when the group has no master (isPrimeSlave);
//   - one address maps to one broker id (a slave promoted to master moves);
//   - a re-registration with an unchanged data version only renews the lease
//     (and one with a new version but the same topics changes no route:
//     applyTopics' sameTopics compares without a lookup per topic);
//   - a route joins a topic's queue data with the broker data of its groups,
//     showing a masterless group's lowest slave as id 0 where the group
//     allows an acting master and the topic is read-only there, except in
//     the route of a group's member topic (SyncBrokerMemberPrefix), which
//     acting-master brokers read to learn their group's real members;
//   - a write-permission wipe or restore visits every topic of the group
//     and counts them all (PermChange.Topics), changed or not;
//   - an empty broker group disappears together with its queue data.
//
// What is fixed:
//   - every registration gets a fresh epoch, and an unregister or an expiry
//     removes only the epoch it names, so a late removal never wipes a fresh
//     re-registration (rocketmq#11043);
//   - leases sit in a deadline index, so an expiry scan costs what is due,
//     not what exists;
//   - each topic's route is kept encoded (deterministic CBOR) with a version
//     derived from its bytes, rebuilt only after that route changed, so an
//     unchanged lookup allocates nothing (rocketmq#10982);
//   - time comes from an injected Clock.
//
// Lock order: mu (route tables) before leaseMu (leases and the deadline
// index). Heartbeats take only leaseMu, route reads only mu for reading.
package registry

import (
	"cmp"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// DefaultThreshold is how long a broker may stay silent before it expires
// when neither its registration nor a Thresholds policy says otherwise.
const DefaultThreshold = 120 * time.Second

// Bounds on the lease timeout a broker may ask for, when Config sets none.
const (
	DefaultMinThreshold = time.Second
	DefaultMaxThreshold = 10 * time.Minute
)

// Errors that callers branch on. They are wrapped with context; test with
// errors.Is.
var (
	ErrTopicNotFound       = errors.New("topic not found")
	ErrClusterNotFound     = errors.New("cluster not found")
	ErrBrokerGroupNotFound = errors.New("broker group not found")
	ErrLeaseNotFound       = errors.New("lease not found")
	ErrStaleEpoch          = errors.New("epoch is not the lease's current epoch")
	ErrStaleState          = errors.New("registration is older than the one held for this broker id")
	ErrInvalid             = errors.New("invalid argument")
	ErrConflict            = errors.New("conflict")
	ErrNotGroupLeader      = errors.New("broker is neither the master nor the acting master of its group")
)

// Clock tells the time. Tests inject a fake one so expiry is tested without
// sleeping.
//
// Leases are timed on a clock that is never stepped: the registry measures
// how long since it started by subtracting Now readings, which for
// SystemClock carry Go's monotonic clock reading (see package time), so
// stepping the machine's wall clock (an edge box booting without a
// real-time clock and then synced, an operator's date -s) neither expires
// every lease at once nor keeps dead brokers' leases. Wall times are only
// what the registry shows: a lease's deadline as a wall time is now's wall
// reading plus what is left of it. A Clock whose Now readings carry no
// monotonic reading (a test clock) is timed by its wall readings, unless
// it is also a MonotonicClock.
type Clock interface {
	Now() time.Time
}

// MonotonicClock is a Clock that tells its never-stepped time itself, so a
// test can step its wall clock (Now) apart from it.
type MonotonicClock interface {
	Clock
	// Monotonic is the time since a fixed point of the clock's choosing.
	Monotonic() time.Duration
}

// SystemClock is the machine's clock: wall readings for what is shown,
// Go's monotonic reading in them for timing leases.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// reading is one reading of the registry's clock: the wall time, for what
// is shown, and ns, the same instant on the registry's timeline, which
// leases are timed by and which follows no step of the wall clock.
type reading struct {
	wall time.Time
	ns   int64
}

// timelineOrigin keeps the timeline's values positive (a lease's zero last
// heartbeat means none), whatever the clock read when the registry started.
const timelineOrigin = int64(1 << 60)

// read reads the registry's clock.
func (r *Registry) read() reading { return r.readingAt(r.clock.Now()) }

// readingAt places now, a reading of the registry's clock just taken, on
// the timeline.
func (r *Registry) readingAt(now time.Time) reading {
	if r.mono != nil {
		return reading{wall: now, ns: timelineOrigin + int64(r.mono.Monotonic()-r.monoBase)}
	}
	return reading{wall: now, ns: timelineOrigin + int64(now.Sub(r.base))}
}

// wallOf is the wall time of ns on the timeline, as of this reading.
func (rd reading) wallOf(ns int64) time.Time { return rd.wall.Add(time.Duration(ns - rd.ns)) }

// Thresholds decides how long a broker may stay silent. It is called with
// the lease lock held, on every registration and heartbeat, so it must be
// fast and must not call back into the Registry.
type Thresholds interface {
	Threshold(l LeaseInfo) time.Duration
}

// ExpiryConfirmer decides which of the due leases to remove now. It is called
// without any lock held; it returns a subset of due (anything else it returns
// is ignored). A lease held back stays due and is offered again on the next
// scan. This is where self-preservation lives.
type ExpiryConfirmer interface {
	ConfirmExpiry(due []LeaseInfo, stats ExpiryStats) []LeaseInfo
}

// ExpiryStats is what a confirmer knows about the whole node at a scan
// (wire.ExpiryStats).
type ExpiryStats = wire.ExpiryStats

// Config configures a Registry. The zero value is usable.
type Config struct {
	// Clock defaults to SystemClock.
	Clock Clock
	// DefaultThreshold applies to brokers that register without a heartbeat
	// timeout of their own; defaults to DefaultThreshold (120 s).
	DefaultThreshold time.Duration
	// MinThreshold and MaxThreshold bound the heartbeat timeout a broker
	// asks for in its registration; default DefaultMinThreshold and
	// DefaultMaxThreshold. They do not bound DefaultThreshold or what a
	// Thresholds policy decides: those are the operator's.
	MinThreshold, MaxThreshold time.Duration
	// Thresholds, when set, overrides each broker's threshold.
	Thresholds Thresholds
	// Confirmer, when set, decides which due leases are removed; by default
	// all of them are.
	Confirmer ExpiryConfirmer
	// NoActingMaster turns off RocketMQ's supportActingMaster: a group
	// without a master is then shown as it is.
	NoActingMaster bool
	// OnChange, when set, is called after a change with the names of the
	// topics whose route changed, without any lock held. The slice is the
	// callee's.
	OnChange func(topics []string)
}

// Registry is a node's route tables. It is safe for concurrent use.
type Registry struct {
	clock        Clock
	base         time.Time      // the timeline's origin (reading.ns), a reading of clock
	mono         MonotonicClock // clock, if it tells its monotonic time itself
	monoBase     time.Duration  // the origin on mono
	defThreshold time.Duration
	minThreshold time.Duration // bounds on what a broker asks for
	maxThreshold time.Duration
	thresholds   Thresholds
	confirmer    ExpiryConfirmer
	actingMaster bool
	onChange     func([]string)
	// alwaysApply turns off applyTopics' sameTopics shortcut, so tests can
	// compare a registry with it and one without.
	alwaysApply bool

	mu       sync.RWMutex
	clusters map[string]*cluster
	groups   map[string]*group
	topics   map[string]*topic

	leaseMu   sync.Mutex
	leases    map[leaseKey]*lease
	deadlines deadlineHeap
	nextEpoch uint64
}

type cluster struct {
	name   string
	groups map[string]*group
}

// group is a broker group (RocketMQ's BrokerData): a master and its slaves
// under one broker name.
type group struct {
	cluster      string
	name         string
	zone         string
	actingMaster bool
	addrs        map[int64]string // broker id -> address
	// topics maps each topic the group holds to the generation of the full
	// registration that last named it; see applyTopics.
	topics map[*topic]uint32
	gen    uint32
	// deleted holds the topics an operator deleted from this group while
	// its broker still had them: full registrations that name one are not
	// allowed to bring it back, until one omits it (the broker dropped it
	// too) or an incremental update names it (the broker created it
	// again). See applyTopics.
	deleted map[string]struct{}
	// applied is the topic of each entry of the last full registration
	// applied to the group, in its order, and appliedCount how many topics
	// the group held after it; sameTopics compares a new registration
	// with them. Nil when tombstones were involved.
	applied      []*topic
	appliedCount int
}

// topic is one topic's queue data, one entry per broker group, sorted by
// group name, and its cached encoded route.
type topic struct {
	name   string
	queues []queue
	route  routeCache
}

type queue struct {
	group   *group
	read    uint32
	write   uint32
	perm    uint8
	sysFlag uint32
}

// New returns an empty Registry.
func New(cfg Config) *Registry {
	r := &Registry{
		clock:        cfg.Clock,
		defThreshold: cfg.DefaultThreshold,
		minThreshold: cmp.Or(cfg.MinThreshold, DefaultMinThreshold),
		maxThreshold: cmp.Or(cfg.MaxThreshold, DefaultMaxThreshold),
		thresholds:   cfg.Thresholds,
		confirmer:    cfg.Confirmer,
		actingMaster: !cfg.NoActingMaster,
		onChange:     cfg.OnChange,
		clusters:     make(map[string]*cluster),
		groups:       make(map[string]*group),
		topics:       make(map[string]*topic),
		leases:       make(map[leaseKey]*lease),
	}
	if r.clock == nil {
		r.clock = SystemClock{}
	}
	if r.defThreshold <= 0 {
		r.defThreshold = DefaultThreshold
	}
	r.maxThreshold = max(r.maxThreshold, r.minThreshold)
	// Seed epochs from the clock so a node restarted with the same broker
	// never hands out an epoch that a message from its past life names.
	r.base = r.clock.Now()
	r.nextEpoch = uint64(r.base.UnixNano())
	if m, ok := r.clock.(MonotonicClock); ok {
		r.mono, r.monoBase = m, m.Monotonic()
	}
	return r
}

// Now returns the registry's clock reading.
func (r *Registry) Now() time.Time { return r.clock.Now() }

func (q *queue) data() wire.QueueData {
	return wire.QueueData{
		BrokerName:  q.group.name,
		ReadQueues:  q.read,
		WriteQueues: q.write,
		Perm:        q.perm,
		SysFlag:     q.sysFlag,
	}
}

func (g *group) brokerData() wire.BrokerData {
	addrs := make(map[int64]string, len(g.addrs))
	for id, a := range g.addrs {
		addrs[id] = a
	}
	return wire.BrokerData{Cluster: g.cluster, Name: g.name, Zone: g.zone, Addrs: addrs}
}

// minID returns the lowest broker id in the group, or -1 when it is empty.
func (g *group) minID() int64 {
	min := int64(-1)
	for id := range g.addrs {
		if min < 0 || id < min {
			min = id
		}
	}
	return min
}

// isPrime reports whether broker id is the group's prime slave (RocketMQ
// 5's isPrimeSlave): the lowest id of a group that has no master. Its
// topics are served read-only while the master is away.
func (g *group) isPrime(id int64) bool {
	return id != wire.MasterID && id == g.minID()
}

// idOf returns the broker id that addr has in the group.
func (g *group) idOf(addr string) (int64, bool) {
	for id, a := range g.addrs {
		if a == addr {
			return id, true
		}
	}
	return 0, false
}

// find returns the index of g's entry in t.queues, or where it would go.
func (t *topic) find(g *group) (int, bool) {
	return slices.BinarySearchFunc(t.queues, g.name, func(q queue, name string) int {
		switch {
		case q.group.name < name:
			return -1
		case q.group.name > name:
			return 1
		}
		return 0
	})
}

// ClusterInfo returns every cluster with its broker groups.
func (r *Registry) ClusterInfo() wire.ClusterInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	info := wire.ClusterInfo{
		Clusters: make(map[string][]string, len(r.clusters)),
		Groups:   make(map[string]wire.BrokerData, len(r.groups)),
	}
	for name, c := range r.clusters {
		info.Clusters[name] = slices.Sorted(maps.Keys(c.groups))
	}
	for name, g := range r.groups {
		info.Groups[name] = g.brokerData()
	}
	return info
}

// BrokerMemberGroup returns the broker data of one group of a cluster.
func (r *Registry) BrokerMemberGroup(clusterName, groupName string) (wire.BrokerData, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	g := r.groups[groupName]
	if g == nil || g.cluster != clusterName {
		return wire.BrokerData{}, wrapf(ErrBrokerGroupNotFound, "broker group %q in cluster %q", groupName, clusterName)
	}
	return g.brokerData(), nil
}
