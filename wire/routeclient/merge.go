package routeclient

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
)

// This file is the merge rule of PROTOCOL.md section 9.1: how the answers
// of several nodes to one topic become one route. Nodes share nothing, so
// a node cut off from some brokers answers, in good faith, without them;
// every broker registers with every node, so what one node lacks while
// another holds it live is the first node's partition, not the broker's
// death.

// view is one node's answer for one topic that carried a route: the route
// it sent, or the route the client named when it answered not-modified.
// A node's ages are relative to its answer, so the merge turns them into
// times (arrival minus age) before comparing answers that arrived at
// different times, as a watch's pushes do.
type view struct {
	route   *wire.Route
	version uint64
	fresh   map[string]wire.GroupFreshness // nil from older nodes
	at      time.Time                      // when the answer arrived: ages count back from it
	ready   bool                           // past its warm-up
	order   int                            // the order the node was asked in
}

// topicAnswers gathers what every node that answered said about one topic.
type topicAnswers struct {
	views         []view
	readyNotFound int // ready nodes that said not-found
	warming       int // nodes that said warming-up
}

// merged is one topic's merged answer.
type merged struct {
	topic   string
	status  wire.RouteStatus // ok, not-modified (the named version is current), not-found or warming-up
	route   wire.Route       // with ok and not-modified
	version uint64           // with ok and not-modified
	answers int              // nodes whose answers were merged
}

// candidate is the best source found so far for one broker group.
type candidate struct {
	queue   wire.QueueData
	broker  wire.BrokerData
	heard   int64 // when the source last heard from the group, Unix ms by this client's clock; MinInt64 when it gave no freshness
	order   int
	live    bool // some holder reports its lease running (or gave no freshness)
	holders int  // ready nodes whose route holds it
}

// merge applies the rule to one topic. named is the version the client
// named (0 for none): the answer is not-modified when the merged route has
// that version.
func (a *topicAnswers) merge(topic string, named uint64) merged {
	m := merged{topic: topic, answers: len(a.views) + a.readyNotFound + a.warming}
	switch {
	case len(a.views) == 0 && a.readyNotFound > 0:
		m.status = wire.StatusNotFound
		return m
	case len(a.views) == 0:
		m.status = wire.StatusWarmingUp
		return m
	}
	groups := make(map[string]*candidate)
	readyAnswers := a.readyNotFound
	for _, v := range a.views {
		if v.ready {
			readyAnswers++
		}
		for i, q := range v.route.Queues {
			if i >= len(v.route.Brokers) {
				break // malformed: the arrays are parallel
			}
			heard, live := int64(math.MinInt64), true
			if f, ok := v.fresh[q.BrokerName]; ok {
				live = f.DeadlineInMs > 0
				if f.AgeMs >= 0 { // a negative age, from the future, is no freshness
					heard = v.at.UnixMilli() - f.AgeMs
				}
			}
			c := groups[q.BrokerName]
			if c == nil {
				c = &candidate{heard: math.MinInt64, order: math.MaxInt}
				groups[q.BrokerName] = c
			}
			if v.ready {
				c.holders++
			}
			c.live = c.live || live
			if heard > c.heard || (heard == c.heard && v.order < c.order) {
				c.queue, c.broker, c.heard, c.order = q, v.route.Brokers[i], heard, v.order
			}
		}
	}
	// A group held only past its deadline (an expiry policy holds it back)
	// while a ready node answered without it is gone.
	for name, c := range groups {
		if !c.live && c.holders < readyAnswers {
			delete(groups, name)
		}
	}
	m.route, m.version = a.build(groups)
	m.status = wire.StatusOK
	if m.version == named {
		m.status = wire.StatusNotModified
	}
	return m
}

// build returns the route of the chosen groups and its version. When the
// nodes agree (every view has one version and nothing was dropped) that
// route is returned as it came, so no encoding is spent on the common case.
func (a *topicAnswers) build(groups map[string]*candidate) (wire.Route, uint64) {
	first := a.views[0]
	same := len(groups) == len(first.route.Queues)
	for _, v := range a.views[1:] {
		same = same && v.version == first.version
	}
	if same {
		return *first.route, first.version
	}
	names := make([]string, 0, len(groups))
	for name := range groups {
		names = append(names, name)
	}
	slices.SortFunc(names, strings.Compare)
	route := wire.Route{Queues: make([]wire.QueueData, len(names)), Brokers: make([]wire.BrokerData, len(names))}
	for i, name := range names {
		route.Queues[i], route.Brokers[i] = groups[name].queue, groups[name].broker
	}
	body, err := wire.Marshal(&route)
	if err != nil { // cannot happen for a decoded route; keep the first answer
		return *first.route, first.version
	}
	return route, wire.RouteVersion(body)
}

// freshnessOf indexes an answer's freshness by broker group.
func freshnessOf(gs []wire.GroupFreshness) map[string]wire.GroupFreshness {
	if len(gs) == 0 {
		return nil
	}
	m := make(map[string]wire.GroupFreshness, len(gs))
	for _, g := range gs {
		m[g.BrokerName] = g
	}
	return m
}

// decodeRoute decodes a result of status ok, first checking that its
// version is that of its route's bytes (PROTOCOL.md 9). A node that sent
// another route under a version (a lie, or bytes corrupted on the way)
// would otherwise have the client cache that route under the version,
// and every honest node would then confirm it "not modified" for good.
// The check costs one SHA-256 of the route per ok result: results come
// with a route only when it changed.
func decodeRoute(res *wire.RouteResult) (wire.Route, uint64, error) {
	if v := wire.RouteVersion(res.Route); v != res.Version {
		return wire.Route{}, 0, fmt.Errorf("route of %s: version %x is not its route's (%x)", res.Topic, res.Version, v)
	}
	return client.DecodeResult(res)
}
