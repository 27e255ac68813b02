package node

import (
	"bytes"
	"slices"
	"sync"

	"github.com/edgereg/edgereg/wire"
)

// This file holds what a node says about itself and about how fresh its
// knowledge is: the freshness carried by route answers and pushes (so a
// client reading from several nodes can tell one node's partition from a
// broker's death, PROTOCOL.md section 9.1), and the node-info request
// operators compare across nodes.

// nodeState is the node's own state as route answers carry it.
func (n *Node) nodeState() wire.NodeState {
	return wire.NodeState{NodeID: n.id, StartedMs: n.started.UnixMilli(), WarmingUp: n.WarmingUp()}
}

// describeRoutes adds to a get-routes answer the freshness of every broker
// group its routes name (not-modified ones too) and the node's state. The
// routes' bytes, hence their versions, are untouched.
func (n *Node) describeRoutes(rs *routeSet) {
	out := rs.out
	var groups []string
	for i := range out.Results {
		if rs.entries[i] == nil && out.Results[i].Status == wire.StatusOK {
			// A route policy filtered this route for the client: name
			// only the groups it shows, never one it hides.
			g := n.filtered.groups(out.Results[i].Version, out.Results[i].Route)
			if groups == nil {
				groups = g // shared: read only
			} else {
				groups = append(slices.Clip(groups), g...) // never into a shared array
			}
		}
		// A filtered not-modified route is not described: the node would
		// have to run the policy again to know its groups.
	}
	// The unfiltered routes are described by the groups they were built
	// with (rs.entries, nil for the others).
	out.Groups = n.reg.AppendFreshness(out.Groups, n.cfg.Clock.Now(), rs.entries, groups)
	out.Node = n.nodeState()
}

// routeEvent is the push for one route result, with the freshness of its
// route's groups and the node's state.
func (n *Node) routeEvent(res wire.RouteResult) *wire.RouteEvent {
	ev := &wire.RouteEvent{Result: res, Node: n.nodeState()}
	if res.Status == wire.StatusOK {
		ev.Groups = n.freshness(nil, n.filtered.groups(res.Version, res.Route))
	}
	return ev
}

// filteredGroups remembers which groups a filtered route names, by the
// route's version, so that a read through a route policy does not decode
// the filtered route again each time only to describe its groups' freshness
// (it was 8 % of a node's CPU on such reads: more than the policy's own
// memoized answer). An entry holds the body it was computed from and is
// used only for the same bytes, so a version shared by two bodies (a hash
// collision, or a policy whose output changed) never gives wrong groups.
// Two generations of at most maxFilteredGroups entries each, as the policy
// host's memo: an approximate LRU that never holds more than twice that.
type filteredGroups struct {
	mu        sync.Mutex
	cur, prev map[uint64]groupsEntry
}

type groupsEntry struct {
	body   []byte
	groups []string
}

const maxFilteredGroups = 4096

func newFilteredGroups() *filteredGroups {
	return &filteredGroups{cur: make(map[uint64]groupsEntry)}
}

// groups returns the groups the route body with this version names. The
// result is shared: callers must not modify it.
func (c *filteredGroups) groups(version uint64, body []byte) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.cur[version]; ok && bytes.Equal(e.body, body) {
		return e.groups
	}
	e, ok := c.prev[version]
	if !ok || !bytes.Equal(e.body, body) {
		e = groupsEntry{body: bytes.Clone(body), groups: routeGroups(body)}
	}
	if len(c.cur) >= maxFilteredGroups {
		c.prev, c.cur = c.cur, make(map[uint64]groupsEntry, maxFilteredGroups)
	}
	c.cur[version] = e
	return e.groups
}

func routeGroups(body []byte) []string {
	var route wire.Route
	if wire.Unmarshal(body, &route) != nil {
		return nil
	}
	names := make([]string, len(route.Queues))
	for i, q := range route.Queues {
		names[i] = q.BrokerName
	}
	return names
}

// freshness converts the registry's freshness to the wire's relative
// durations, measured now by the node's clock.
func (n *Node) freshness(topics, groups []string) []wire.GroupFreshness {
	if len(topics) == 0 && len(groups) == 0 {
		return nil
	}
	now := n.cfg.Clock.Now()
	fs := n.reg.Freshness(topics, groups)
	out := make([]wire.GroupFreshness, 0, len(fs))
	for _, f := range fs {
		if f.LastHeard.IsZero() {
			continue // no lease behind it: say nothing rather than "fresh"
		}
		out = append(out, wire.GroupFreshness{
			BrokerName:   f.Name,
			AgeMs:        max(now.Sub(f.LastHeard).Milliseconds(), 0),
			DeadlineInMs: f.Deadline.Sub(now).Milliseconds(),
		})
	}
	return out
}

// nodeInfo answers node-info.
func (n *Node) nodeInfo() wire.NodeInfo {
	info := wire.NodeInfo{
		NodeID: n.id, StartedMs: n.started.UnixMilli(), NowMs: n.cfg.Clock.Now().UnixMilli(),
		WarmingUp: n.WarmingUp(), Version: Version,
		Leases: n.reg.LeaseCount(), Topics: n.reg.TopicCount(), Connections: int(n.stats.conns.Load()),
	}
	for _, p := range n.policyList().Policies {
		if p.Hash != "" {
			if info.Policies == nil {
				info.Policies = make(map[string]string)
			}
			info.Policies[p.Hook] = p.Hash
		}
	}
	return info
}
