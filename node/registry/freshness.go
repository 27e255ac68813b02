package registry

import (
	"slices"
	"strings"
	"time"
)

// GroupFreshness is how fresh the registry's knowledge of one broker group
// is: when it last heard from any member and when the last member's lease
// runs out.
type GroupFreshness struct {
	Name      string
	LastHeard time.Time // latest register, update-topics or heartbeat of any member
	Deadline  time.Time // latest lease deadline of any member
}

// Freshness describes the broker groups that hold any of topics, and the
// groups named in groups, sorted by name. Topics and groups it does not
// hold are skipped; a group with no lease behind it (which the registry
// should never hold) gets zero times. It is read-only and takes the route
// read lock, then the lease lock (the registry's lock order).
func (r *Registry) Freshness(topics, groups []string) []GroupFreshness {
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := make(map[*group]struct{})
	for _, name := range topics {
		if t := r.topics[name]; t != nil {
			for i := range t.queues {
				seen[t.queues[i].group] = struct{}{}
			}
		}
	}
	for _, name := range groups {
		if g := r.groups[name]; g != nil {
			seen[g] = struct{}{}
		}
	}
	out := make([]GroupFreshness, 0, len(seen))
	r.leaseMu.Lock()
	for g := range seen {
		f := GroupFreshness{Name: g.name}
		var last, deadline int64
		for _, addr := range g.addrs {
			if l := r.leases[leaseKey{g.cluster, addr}]; l != nil {
				last, deadline = max(last, l.last), max(deadline, l.deadline)
			}
		}
		if last > 0 {
			f.LastHeard, f.Deadline = time.Unix(0, last), time.Unix(0, deadline)
		}
		out = append(out, f)
	}
	r.leaseMu.Unlock()
	slices.SortFunc(out, func(a, b GroupFreshness) int { return strings.Compare(a.Name, b.Name) })
	return out
}
