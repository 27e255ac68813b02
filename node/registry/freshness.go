package registry

import (
	"slices"
	"strings"
	"time"

	"github.com/edgereg/edgereg/wire"
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
	rd := r.read()
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
			f.LastHeard, f.Deadline = rd.wallOf(last), rd.wallOf(deadline)
		}
		out = append(out, f)
	}
	r.leaseMu.Unlock()
	slices.SortFunc(out, func(a, b GroupFreshness) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// AppendFreshness appends to dst, as of now, the freshness of the broker
// groups the routes name (nil entries are skipped) and of the groups named
// in names, sorted by name,
// each once, as the wire carries it: what Freshness gives for the routes'
// topics, without looking the topics up again, and without allocating for
// the usual read (one route, dst with room for its groups). A route is
// described by the groups it was built with, the ones its reader was
// sent. Groups without a lease behind them are left out. It takes the
// route read lock, then the lease lock (the registry's lock order).
func (r *Registry) AppendFreshness(dst []wire.GroupFreshness, now time.Time, routes []*EncodedRoute, names []string) []wire.GroupFreshness {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var scratch [16]*group
	groups := scratch[:0]
	switch {
	case len(routes) == 1 && routes[0] != nil && len(names) == 0:
		groups = routes[0].groups // sorted, each once
	default:
		groups = r.unionGroups(groups, routes, names)
	}
	if len(groups) == 0 {
		return dst
	}
	dst = slices.Grow(dst, len(groups))
	nowNs := r.readingAt(now).ns
	r.leaseMu.Lock()
	for _, g := range groups {
		var last, deadline int64
		for _, addr := range g.addrs {
			if l := r.leases[leaseKey{g.cluster, addr}]; l != nil {
				last, deadline = max(last, l.last), max(deadline, l.deadline)
			}
		}
		if last == 0 {
			continue // no lease behind it: say nothing rather than "fresh"
		}
		dst = append(dst, wire.GroupFreshness{
			BrokerName:   g.name,
			AgeMs:        max(msBetween(last, nowNs), 0),
			DeadlineInMs: msBetween(nowNs, deadline),
		})
	}
	r.leaseMu.Unlock()
	return dst
}

// msBetween is (to - from) in whole milliseconds, as time.Duration's
// Milliseconds truncates it.
func msBetween(from, to int64) int64 {
	return time.Duration(to - from).Milliseconds()
}

// unionGroups appends to dst the groups of routes and those named in
// names, each once, sorted by name. Called with mu held.
func (r *Registry) unionGroups(dst []*group, routes []*EncodedRoute, names []string) []*group {
	var seen map[*group]struct{} // only once dst is too long to search
	add := func(g *group) {
		if seen == nil {
			if !slices.Contains(dst, g) {
				dst = append(dst, g)
			}
			if len(dst) > 16 {
				seen = make(map[*group]struct{}, 2*len(dst))
				for _, g := range dst {
					seen[g] = struct{}{}
				}
			}
			return
		}
		if _, ok := seen[g]; !ok {
			seen[g] = struct{}{}
			dst = append(dst, g)
		}
	}
	for _, e := range routes {
		if e == nil {
			continue
		}
		for _, g := range e.groups {
			add(g)
		}
	}
	for _, name := range names {
		if g := r.groups[name]; g != nil {
			add(g)
		}
	}
	slices.SortFunc(dst, func(a, b *group) int { return strings.Compare(a.name, b.name) })
	return dst
}
