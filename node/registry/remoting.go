package registry

import (
	"slices"
	"strings"

	"github.com/edgereg/edgereg/wire"
)

// GroupTopics returns the topic configuration a broker group holds now, as
// its queue data says, sorted by topic name; nil for an unknown group.
//
// RocketMQ brokers register partial topic sets (one created topic, or the
// full set in chunks of 800) with nothing telling a partial registration from
// a full one, and a NameServer treats each as an upsert. A node's Register
// takes the full set, so the remoting listener registers the union of this
// and what the broker listed.
func (r *Registry) GroupTopics(groupName string) []wire.TopicConfig {
	r.mu.RLock()
	defer r.mu.RUnlock()
	g := r.groups[groupName]
	if g == nil {
		return nil
	}
	out := make([]wire.TopicConfig, 0, len(g.topics))
	for t := range g.topics {
		if i, ok := t.find(g); ok {
			q := t.queues[i]
			out = append(out, wire.TopicConfig{Name: t.name, ReadQueues: q.read, WriteQueues: q.write, Perm: q.perm, SysFlag: q.sysFlag})
		}
	}
	slices.SortFunc(out, func(a, b wire.TopicConfig) int { return strings.Compare(a.Name, b.Name) })
	return out
}
