package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/routeclient"
)

// routeOutcome is what the route cache can say about a topic.
type routeOutcome uint8

const (
	routeFound       routeOutcome = iota // the route is known
	routeNotExist                        // a node said no broker holds the topic
	routeUnavailable                     // no node answered, or every one is warming up
)

// routeCache answers route reads at the edge. Its lock is never held while
// calling the route client. The first read of a topic asks
// the nodes (through the route client, which fails over between them) and
// subscribes a watch, so every later change is pushed into the cache; every
// later read is served from memory. A cached route is served however long
// the WAN is cut: a producer with last known routes can still send, while
// rocketmq-client-go gives up on a NameServer after 6 s. A topic is
// reported missing only when a node says so: "not found" answers are
// trusted for NegativeTTL for topics the cache holds (others are not cached
// at all), then asked again; "warming up" and unreachable nodes never count
// as missing.
type routeCache struct {
	g *Gateway

	mu     sync.Mutex
	topics map[string]*topicEntry
}

type topicEntry struct {
	outcome routeOutcome // routeFound or routeNotExist
	route   wire.Route
	version uint64
	// bodies caches the encoded answer per dialect; reset on a change.
	bodies  map[bool][]byte
	checked time.Time // when a node last said what outcome says
	asked   time.Time
	stop    context.CancelFunc // ends the watch
}

func newRouteCache(g *Gateway) *routeCache {
	return &routeCache{g: g, topics: make(map[string]*topicEntry)}
}

// routeAnswer is one read's result: the route (read-only) and its version,
// with the cached body for the dialect asked, if one was encoded before.
type routeAnswer struct {
	outcome routeOutcome
	route   wire.Route
	version uint64
	body    []byte
	cached  bool
	err     error
}

// get answers a read of topic; standard selects the JSON dialect whose
// encoded body is looked up in the cache.
func (rc *routeCache) get(ctx context.Context, topic string, standard bool) routeAnswer {
	now := time.Now()
	rc.mu.Lock()
	if e := rc.topics[topic]; e != nil {
		e.asked = now
		if e.outcome == routeFound || now.Sub(e.checked) < rc.g.cfg.NegativeTTL {
			a := routeAnswer{outcome: e.outcome, route: e.route, version: e.version, body: e.bodies[standard], cached: true}
			rc.mu.Unlock()
			return a
		}
	}
	rc.mu.Unlock()

	rctx, cancel := context.WithTimeout(ctx, rc.g.cfg.UpstreamTimeout)
	route, version, err := rc.g.routes.Route(rctx, topic)
	cancel()
	switch {
	case err == nil:
		rc.store(topic, routeFound, route, version)
		return routeAnswer{outcome: routeFound, route: route, version: version}
	case errors.Is(err, wire.ErrNotFound):
		if !rc.gone(topic) {
			return rc.get(ctx, topic, standard) // the cached route stands
		}
		if rc.g.brokers.vouches(topic) {
			// Nothing cached to serve, and the nodes' word predates the
			// registration of a broker here that holds the topic (a node
			// restarted, or expired it in a cut): withheld, as for
			// unreachable nodes, not TOPIC_NOT_EXIST.
			return routeAnswer{outcome: routeUnavailable, err: errReregistering}
		}
		return routeAnswer{outcome: routeNotExist, err: err}
	}
	return routeAnswer{outcome: routeUnavailable, err: err}
}

// errReregistering is why a route read is withheld while the nodes say a
// topic is gone that a broker behind the gateway holds and is registering
// with them again.
var errReregistering = errors.New("the nodes know no broker holding the topic, but a broker of this site that holds it is registering with them again")

// keepBody caches an encoded answer for the version it was made from.
func (rc *routeCache) keepBody(topic string, version uint64, standard bool, body []byte) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if e := rc.topics[topic]; e != nil && e.outcome == routeFound && e.version == version {
		if e.bodies == nil {
			e.bodies = make(map[bool][]byte, 2)
		}
		e.bodies[standard] = body
	}
}

// gone records that a node knows no broker holding topic. Only a topic
// already cached keeps an entry (and its watch, which pushes the topic's
// return): made-up names take no room.
//
// A cached route of a topic a broker behind the gateway holds while its
// registrar is registering it again (brokerTable.vouches) stays: gone
// reports whether the topic is gone.
func (rc *routeCache) gone(topic string) bool {
	vouched := rc.vouched(topic)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	e := rc.topics[topic]
	switch {
	case e == nil:
		return true
	case vouched && e.outcome == routeFound:
		return false
	}
	rc.setLocked(e, routeNotExist, wire.Route{}, 0, time.Now())
	return true
}

// vouched reports, for a cached route, whether a broker behind the gateway
// vouches for topic (brokerTable.vouches), logging that the nodes' word is
// not taken.
func (rc *routeCache) vouched(topic string) bool {
	rc.mu.Lock()
	e := rc.topics[topic]
	found := e != nil && e.outcome == routeFound
	rc.mu.Unlock()
	if !found || !rc.g.brokers.vouches(topic) {
		return false
	}
	rc.g.peerLog.Info("the nodes say a topic is gone that a broker on this site holds, while it registers with them again: keeping its route", "topic", topic)
	return true
}

// store records a route a node gave for topic, and subscribes a watch for it
// if none runs yet and the cache has room. The watch is made outside the
// lock (routeclient takes locks of its own); of two racing stores, the
// first entry wins and the other's watch is ended.
func (rc *routeCache) store(topic string, outcome routeOutcome, route wire.Route, version uint64) {
	now := time.Now()
	rc.mu.Lock()
	e := rc.topics[topic]
	full := len(rc.topics) >= rc.g.cfg.MaxTopics
	if e != nil || full {
		if e != nil {
			rc.setLocked(e, outcome, route, version, now)
		}
		rc.mu.Unlock()
		if full && e == nil {
			// Served, not cached, and not left in the route client's
			// cache either, which would refresh it for ever: the cache
			// holds MaxTopics routes.
			rc.g.routes.Forget(topic)
		}
		return
	}
	rc.mu.Unlock()

	ctx, cancel := context.WithCancel(rc.g.ctx)
	updates, err := rc.g.routes.Watch(ctx, topic)
	if err != nil {
		cancel()
		rc.g.peerLog.Warn("cannot watch topic: not caching it", "topic", topic, "err", err)
		rc.g.routes.Forget(topic)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if e := rc.topics[topic]; e != nil {
		cancel()
		rc.setLocked(e, outcome, route, version, now)
		return
	}
	e = &topicEntry{asked: now, stop: cancel}
	if !rc.g.spawn(func() { rc.follow(topic, e, updates) }) {
		cancel() // the gateway is closing
		return
	}
	rc.topics[topic] = e
	rc.setLocked(e, outcome, route, version, now)
}

func (rc *routeCache) setLocked(e *topicEntry, outcome routeOutcome, route wire.Route, version uint64, now time.Time) {
	if e.outcome != outcome || e.version != version {
		e.bodies = nil
	}
	e.outcome, e.route, e.version, e.checked = outcome, route, version, now
}

// follow applies the pushed updates of one watched topic until its watch
// ends; then, if the cache no longer holds the topic (forgotten as idle),
// the route client forgets it too, else it would refresh it for ever.
func (rc *routeCache) follow(topic string, e *topicEntry, updates <-chan routeclient.Update) {
	defer func() {
		rc.mu.Lock()
		_, held := rc.topics[topic]
		rc.mu.Unlock()
		if !held {
			rc.g.routes.Forget(topic)
		}
	}()
	for u := range updates {
		if u.Gone && rc.vouched(topic) {
			rc.g.metrics.routeEvents.Inc()
			continue
		}
		rc.mu.Lock()
		if rc.topics[topic] == e {
			if u.Gone {
				rc.setLocked(e, routeNotExist, wire.Route{}, 0, time.Now())
			} else {
				rc.setLocked(e, routeFound, u.Route, u.Version, time.Now())
			}
		}
		rc.mu.Unlock()
		rc.g.metrics.routeEvents.Inc()
	}
}

// forget stops watching topics nobody asked for within idle.
func (rc *routeCache) forget(idle time.Duration) {
	cut := time.Now().Add(-idle)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for t, e := range rc.topics {
		if e.asked.Before(cut) {
			e.stop()
			delete(rc.topics, t)
		}
	}
}

func (rc *routeCache) len() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.topics)
}

// revalidate re-reads every cached route from the route client. Its own
// refresh (one batched request per RefreshInterval) keeps its cache current
// even for a topic whose watch failed, so this is a memory read per topic
// while things work. The pass stops at the first topic the route client
// could not confirm with a node: the WAN is down, the cached routes stand,
// and the pass does not spend a timeout per topic.
func (rc *routeCache) revalidate(ctx context.Context) {
	type held struct {
		topic   string
		version uint64
	}
	rc.mu.Lock()
	list := make([]held, 0, len(rc.topics))
	for t, e := range rc.topics {
		if e.outcome == routeFound {
			list = append(list, held{t, e.version})
		}
	}
	rc.mu.Unlock()
	for _, h := range list {
		if ctx.Err() != nil {
			return
		}
		stale := rc.g.routes.Stats().StaleServed
		rctx, cancel := context.WithTimeout(ctx, rc.g.cfg.UpstreamTimeout)
		route, version, err := rc.g.routes.Route(rctx, h.topic)
		cancel()
		outcome := routeFound
		switch {
		case err == nil && rc.g.routes.Stats().StaleServed != stale:
			return // served stale: no node answered
		case err == nil:
			// Changed or not, a node confirmed it within two of the
			// route client's refresh intervals: recorded as checked.
		case errors.Is(err, wire.ErrNotFound):
			if rc.vouched(h.topic) {
				continue
			}
			outcome, route, version = routeNotExist, wire.Route{}, 0
		default:
			return
		}
		rc.mu.Lock()
		// Only over what this pass read: a watch may have pushed newer.
		if e := rc.topics[h.topic]; e != nil && e.outcome == routeFound && e.version == h.version {
			rc.setLocked(e, outcome, route, version, time.Now())
		}
		rc.mu.Unlock()
	}
}

// oldest returns when a node last confirmed the least recently confirmed
// cached route (zero with none cached): how old a route the gateway serves
// may be while the WAN is cut.
func (rc *routeCache) oldest() time.Time {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var t time.Time
	for _, e := range rc.topics {
		if e.outcome == routeFound && (t.IsZero() || e.checked.Before(t)) {
			t = e.checked
		}
	}
	return t
}
