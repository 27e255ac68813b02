package registry

import (
	"maps"
	"slices"
	"strings"

	"github.com/edgereg/edgereg/wire"
)

// SystemTopicPrefix marks RocketMQ's system topics (TopicValidator).
const SystemTopicPrefix = "rmq_sys_"

// systemTopics are RocketMQ's system topics that lack the prefix:
// TopicValidator.SYSTEM_TOPIC_SET as of 5.3 (whose RocksDB stores added
// the last three), and rocketmq-broker-cluster-name, which TopicValidator
// does not list but edgereg has counted since its first release.
var systemTopics = map[string]bool{
	"TBW102":                              true,
	"SCHEDULE_TOPIC_XXXX":                 true,
	"BenchmarkTest":                       true,
	"RMQ_SYS_TRANS_HALF_TOPIC":            true,
	"RMQ_SYS_TRACE_TOPIC":                 true,
	"RMQ_SYS_TRANS_OP_HALF_TOPIC":         true,
	"TRANS_CHECK_MAX_TIME_TOPIC":          true,
	"SELF_TEST_TOPIC":                     true,
	"OFFSET_MOVED_EVENT":                  true,
	"rocketmq-broker-cluster-name":        true,
	"CHECKPOINT_TOPIC":                    true,
	"RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC":    true,
	"RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC": true,
}

// IsSystemTopic reports whether name is one of RocketMQ's system topics.
func IsSystemTopic(name string) bool {
	return systemTopics[name] || strings.HasPrefix(name, SystemTopicPrefix)
}

// Topics returns every topic name, sorted. The names are copied under the
// lock and sorted after it: sorting 100k names takes tens of milliseconds,
// which registrations would wait for.
func (r *Registry) Topics() []string {
	r.mu.RLock()
	names := make([]string, 0, len(r.topics))
	for name := range r.topics {
		names = append(names, name)
	}
	r.mu.RUnlock()
	slices.Sort(names)
	return names
}

// FirstTopics returns the first n topic names in sorted order, for the
// status page, which shows only those: it keeps at most 2n names while it
// scans (sorting them and dropping the upper half when full), so its cost
// is a pass over the names, not a copy and sort of every one.
func (r *Registry) FirstTopics(n int) []string {
	if n <= 0 {
		return nil
	}
	r.mu.RLock()
	out := make([]string, 0, 2*n)
	var bound string // once set, no name above it is among the first n
	for name := range r.topics {
		if bound != "" && name > bound {
			continue
		}
		out = append(out, name)
		if len(out) == 2*n {
			slices.Sort(out)
			out, bound = out[:n], out[n-1]
		}
	}
	r.mu.RUnlock()
	slices.Sort(out)
	return out[:min(n, len(out))]
}

// TopicsByCluster returns the topics held by any broker group of a cluster,
// sorted.
func (r *Registry) TopicsByCluster(clusterName string) ([]string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c := r.clusters[clusterName]
	if c == nil {
		return nil, wrapf(ErrClusterNotFound, "%q", clusterName)
	}
	set := make(map[string]struct{})
	for _, g := range c.groups {
		for t := range g.topics {
			set[t.name] = struct{}{}
		}
	}
	return slices.Sorted(maps.Keys(set)), nil
}

// SystemTopics returns, as RocketMQ's getSystemTopicList does, every cluster
// name and broker group name (each is a system topic of its own), plus the
// registered topics that are RocketMQ system topics; sorted, without
// duplicates.
func (r *Registry) SystemTopics() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	set := make(map[string]struct{})
	for name, c := range r.clusters {
		set[name] = struct{}{}
		for g := range c.groups {
			set[g] = struct{}{}
		}
	}
	for name := range r.topics {
		if IsSystemTopic(name) {
			set[name] = struct{}{}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// UnitTopics returns the topics whose system flag has the unit bit.
func (r *Registry) UnitTopics() []string {
	return r.topicsWhere(func(f uint32) bool { return f&wire.SysFlagUnit != 0 })
}

// UnitSubTopics returns the topics whose system flag has the unit-sub bit.
func (r *Registry) UnitSubTopics() []string {
	return r.topicsWhere(func(f uint32) bool { return f&wire.SysFlagUnitSub != 0 })
}

// UnitSubNonUnitTopics returns the topics with the unit-sub bit but not the
// unit bit.
func (r *Registry) UnitSubNonUnitTopics() []string {
	return r.topicsWhere(func(f uint32) bool { return f&wire.SysFlagUnitSub != 0 && f&wire.SysFlagUnit == 0 })
}

// topicsWhere returns the sorted topics whose first queue data's system flag
// matches, as RocketMQ looks at one queue data per topic.
func (r *Registry) topicsWhere(match func(sysFlag uint32) bool) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []string
	for name, t := range r.topics {
		if len(t.queues) > 0 && match(t.queues[0].sysFlag) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// DeleteTopic removes a topic everywhere or, when clusters are named, only
// from the broker groups of those clusters. A topic left without queue data
// disappears. Each group it was removed from keeps a tombstone, so the
// group's next full registration does not bring it back while the broker
// still has it: it returns only after a full registration without it, or
// an incremental update that names it. Tombstones live as long as their
// group (a node restart or the group's expiry forgets them).
func (r *Registry) DeleteTopic(name string, clusters ...string) error {
	r.mu.Lock()
	cs, err := r.deleteTopic(name, clusters)
	r.mu.Unlock()
	if err != nil {
		return err
	}
	r.notify(cs)
	return nil
}

func (r *Registry) deleteTopic(name string, clusters []string) (*changeSet, error) {
	t := r.topics[name]
	if t == nil {
		return nil, wrapf(ErrTopicNotFound, "%q", name)
	}
	for _, c := range clusters {
		if r.clusters[c] == nil {
			return nil, wrapf(ErrClusterNotFound, "%q", c)
		}
	}
	cs := &changeSet{}
	for _, q := range slices.Clone(t.queues) {
		if len(clusters) == 0 || slices.Contains(clusters, q.group.cluster) {
			r.removeQueue(t, q.group, cs)
			if q.group.deleted == nil {
				q.group.deleted = make(map[string]struct{})
			}
			q.group.deleted[name] = struct{}{}
		}
	}
	return cs, nil
}

// PermChange is what a write-permission edit did to a broker group.
type PermChange struct {
	// Topics is how many topics the group holds queue data in, each of
	// which the edit visited: the count a NameServer answers
	// (wipeTopicCount, addTopicCount), changed or not.
	Topics int
	// Changed is how many of those had their permission changed.
	Changed int
}

// WipeWritePerm takes write permission away from every topic of a broker
// group and returns how many topics changed.
func (r *Registry) WipeWritePerm(groupName string) (int, error) {
	pc, err := r.EditWritePerm(groupName, false)
	return pc.Changed, err
}

// AddWritePerm restores read and write permission on every topic of a
// broker group and returns how many topics changed.
func (r *Registry) AddWritePerm(groupName string) (int, error) {
	pc, err := r.EditWritePerm(groupName, true)
	return pc.Changed, err
}

// EditWritePerm wipes the write permission of every topic of a broker
// group (add false: the WRITE bit cleared) or restores it (add true: set to
// READ|WRITE, dropping INHERIT and PRIORITY, as RocketMQ's
// operateWritePermOfBroker does), and says how many topics it visited and
// how many changed.
func (r *Registry) EditWritePerm(groupName string, add bool) (PermChange, error) {
	perm := func(p uint8) uint8 { return p &^ wire.PermWrite }
	if add {
		perm = func(uint8) uint8 { return wire.PermRead | wire.PermWrite }
	}
	r.mu.Lock()
	g := r.groups[groupName]
	if g == nil {
		r.mu.Unlock()
		return PermChange{}, wrapf(ErrBrokerGroupNotFound, "%q", groupName)
	}
	cs := &changeSet{}
	visited := r.setPerm(g, cs, perm)
	r.mu.Unlock()
	r.notify(cs)
	return PermChange{Topics: visited, Changed: len(cs.topics)}, nil
}

func (r *Registry) wipeWrite(g *group, cs *changeSet) {
	r.setPerm(g, cs, func(p uint8) uint8 { return p &^ wire.PermWrite })
}

// setPerm rewrites the permission of g's queue data in each of its topics,
// recording the topics where it changed, and returns how many topics it
// visited.
func (r *Registry) setPerm(g *group, cs *changeSet, perm func(uint8) uint8) int {
	visited := 0
	for t := range g.topics {
		i, found := t.find(g)
		if !found {
			continue
		}
		visited++
		if p := perm(t.queues[i].perm); p != t.queues[i].perm {
			t.queues[i].perm = p
			cs.addTopic(t)
		}
	}
	return visited
}

// TopicCount returns how many topics have a route.
func (r *Registry) TopicCount() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.topics)
}
