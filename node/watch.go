package node

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
)

// Watch fan-out.
//
// The registry calls watchHub.changed, with no lock of its own held, after
// every change. The hub looks up who watches the changed topics and marks
// them: it adds the topics to each watcher's pending set and wakes the
// watcher's pusher goroutine, which reads the routes current at that moment
// and writes them to its stream. Marking never blocks (the pending set is a
// set, the wake-up channel holds one token), so a slow or stalled watcher
// holds up nobody: not the registry, not the broker whose registration
// changed the routes, not other watchers. It loses nothing either: a topic
// marked while the pusher is busy stays pending, so the pusher comes back to
// it and pushes the route current then (etcd keeps its slow "victim"
// watchers the same way; here the backlog is bounded by the watched topics,
// not by the number of changes). A watcher that cannot write for the write
// timeout loses its stream, and with it the watch.
//
// Lock order, outer to inner:
//
//	watcher.mu  →  watchHub.mu
//	watcher.mu  →  connState.watchMu
//	watcher.pendMu, connState.watchMu and streamWriter.mu are leaves:
//	nothing is taken while one is held. The pusher writes (streamWriter.mu)
//	holding no other lock.
//
// The hub never takes a watcher's mu: changed and markAll copy the
// subscribers under hub.mu and mark them after releasing it. watch, unwatch
// and close hold watcher.mu while they add or remove subscriptions.

// watchHub routes the registry's change notices to the watchers of each
// topic.
type watchHub struct {
	mu      sync.Mutex
	byTopic map[string]map[*watcher]struct{}
	count   int // watch streams
	// events holds the encoded route-event frame of each watched topic's
	// latest version, shared by every watcher no route policy changes the
	// route for: the event is encoded once per (topic, version), not once
	// per watcher. Entries go when their topic's last watcher does.
	events map[string]*sharedEvent

	encodes atomic.Uint64 // shared events encoded, for tests
}

// sharedEvent is one topic version's route-event frame, encoded by the
// first watcher that needs it.
type sharedEvent struct {
	version uint64
	at      time.Time // when it was made: its freshness ages are from then
	once    sync.Once
	frame   []byte
	err     error
}

func newWatchHub() *watchHub {
	return &watchHub{
		byTopic: make(map[string]map[*watcher]struct{}),
		events:  make(map[string]*sharedEvent),
	}
}

func (h *watchHub) watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// subscriptions counts (topic, watcher) pairs.
func (h *watchHub) subscriptions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ws := range h.byTopic {
		n += len(ws)
	}
	return n
}

// changed is the registry's OnChange hook. It marks the watchers of the
// topics, outside the hub's lock; each watcher's own goroutine reads and
// pushes the new routes.
func (h *watchHub) changed(topics []string) {
	h.mu.Lock()
	marks := make(map[*watcher][]string)
	for _, t := range topics {
		for w := range h.byTopic[t] {
			marks[w] = append(marks[w], t)
		}
	}
	h.mu.Unlock()
	for w, ts := range marks {
		w.mark(ts)
	}
}

// markAll makes every watcher look at every topic it watches again.
func (h *watchHub) markAll() {
	h.mu.Lock()
	marks := make(map[*watcher][]string)
	for t, ws := range h.byTopic {
		for w := range ws {
			marks[w] = append(marks[w], t)
		}
	}
	h.mu.Unlock()
	for w, ts := range marks {
		w.mark(ts)
	}
}

func (h *watchHub) add(w *watcher, topics []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range topics {
		ws := h.byTopic[t]
		if ws == nil {
			ws = make(map[*watcher]struct{})
			h.byTopic[t] = ws
		}
		ws[w] = struct{}{}
	}
}

func (h *watchHub) remove(w *watcher, topics []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range topics {
		if ws := h.byTopic[t]; ws != nil {
			delete(ws, w)
			if len(ws) == 0 {
				delete(h.byTopic, t)
				delete(h.events, t)
			}
		}
	}
}

// sharedEventTTL bounds how long a shared event is reused. An event carries
// the freshness of its route's groups (ages of their last heartbeats), so a
// watcher that comes to a version late must not be told ages from long ago;
// the watchers of one change all push within this, and share one encode.
const sharedEventTTL = time.Second

// sharedFrame returns the route-event frame of res, a topic's unfiltered
// route, encoding it with encode only if no watcher has done so for this
// version within sharedEventTTL of now.
func (h *watchHub) sharedFrame(res *wire.RouteResult, now time.Time, encode func(*wire.RouteResult) ([]byte, error)) ([]byte, error) {
	h.mu.Lock()
	e := h.events[res.Topic]
	if e == nil || e.version != res.Version || now.Sub(e.at) >= sharedEventTTL || now.Before(e.at) {
		e = &sharedEvent{version: res.Version, at: now}
		if h.byTopic[res.Topic] != nil { // else nobody is left to share it
			h.events[res.Topic] = e
		}
	}
	h.mu.Unlock()
	// Encoded outside the lock: the first watcher encodes, the others of
	// this version wait for it in once.Do.
	e.once.Do(func() {
		h.encodes.Add(1)
		e.frame, e.err = encode(res)
	})
	return e.frame, e.err
}

// encodeRouteEvent is the frame of one route-event push, with the
// freshness of the route's groups and the node's state (node/info.go).
func (n *Node) encodeRouteEvent(res *wire.RouteResult) ([]byte, error) {
	body, err := wire.Marshal(n.routeEvent(*res))
	if err != nil {
		return nil, err
	}
	return wire.AppendFrame(nil, &wire.Frame{Type: wire.TypeRouteEvent, Body: body})
}

// watcher pushes route events for the topics one stream watches. It is
// owned by the stream's request loop, which closes it when the stream ends.
type watcher struct {
	n  *Node
	cs *connState
	w  *streamWriter

	mu       sync.Mutex
	versions map[string]uint64 // topic -> version the client has
	attrs    wire.ClientAttrs  // from the latest watch request
	// pushed is the version last pushed per topic, kept for a while after
	// an unwatch (see watch); unsure lists topics whose version the client
	// holds the node cannot tell, because a push crossed the watch that
	// named it: their current route is pushed whatever its version.
	pushed map[string]uint64
	unsure map[string]struct{}

	pendMu  sync.Mutex
	pending map[string]struct{} // topics to look at again

	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

func (n *Node) newWatcher(cs *connState, w *streamWriter) *watcher {
	wt := &watcher{
		n: n, cs: cs, w: w,
		versions: make(map[string]uint64),
		pushed:   make(map[string]uint64),
		unsure:   make(map[string]struct{}),
		pending:  make(map[string]struct{}),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	wt.wg.Add(1)
	go wt.run()
	n.watches.mu.Lock()
	n.watches.count++
	n.watches.mu.Unlock()
	return wt
}

func (n *Node) watch(cs *connState, w *streamWriter, wp **watcher, q *wire.Watch) (any, error) {
	if len(q.Topics) == 0 || len(q.Topics) > MaxTopicsPerQuery {
		return nil, wire.Errorf(wire.CodeBadRequest, "watch names %d topics: give 1 to %d", len(q.Topics), MaxTopicsPerQuery)
	}
	for _, tv := range q.Topics {
		if err := registry.ValidTopicName(tv.Topic); err != nil {
			return nil, err
		}
	}
	if *wp == nil {
		*wp = n.newWatcher(cs, w)
	}
	wt := *wp
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.attrs = q.Client
	var added []string
	for _, tv := range q.Topics {
		if _, ok := wt.versions[tv.Topic]; !ok {
			added = append(added, tv.Topic)
		}
	}
	added = uniq(added)
	if err := cs.addWatches(len(added), n.cfg.MaxWatchesPerConn); err != nil {
		return nil, err
	}
	n.watches.add(wt, added)
	topics := make([]string, len(q.Topics))
	for i, tv := range q.Topics {
		// A push the node wrote before this watch arrived may still be on
		// its way to the client, which then holds that version, not the
		// one it named. Trusting the named one would lose a final version
		// whenever the route went back to it (versions are hashes of the
		// route, so that happens), so push the current route instead.
		if p, ok := wt.pushed[tv.Topic]; ok && p != tv.Version {
			wt.unsure[tv.Topic] = struct{}{}
		}
		wt.versions[tv.Topic] = tv.Version
		topics[i] = tv.Topic
	}
	wt.mark(topics)
	return wire.WatchAck{Watching: len(wt.versions)}, nil
}

// uniq drops repeated names, keeping the first of each.
func uniq(ss []string) []string {
	if len(ss) < 2 {
		return ss
	}
	seen := make(map[string]struct{}, len(ss))
	out := ss[:0]
	for _, s := range ss {
		if _, dup := seen[s]; !dup {
			seen[s] = struct{}{}
			out = append(out, s)
		}
	}
	return out
}

func (n *Node) unwatch(cs *connState, wt *watcher, q *wire.Unwatch) (any, error) {
	if wt == nil {
		return wire.WatchAck{}, nil
	}
	wt.mu.Lock()
	defer wt.mu.Unlock()
	var removed []string
	for _, t := range q.Topics {
		if _, ok := wt.versions[t]; ok {
			delete(wt.versions, t)
			removed = append(removed, t)
		}
	}
	n.watches.remove(wt, removed)
	cs.addWatches(-len(removed), n.cfg.MaxWatchesPerConn)
	// What was pushed for unwatched topics is remembered so a re-watch
	// can tell a crossing push (see watch), within a bound: past it the
	// unwatched ones are forgotten and a re-watch trusts the version named.
	if len(wt.pushed) > len(wt.versions)+MaxTopicsPerQuery {
		for t := range wt.pushed {
			if _, ok := wt.versions[t]; !ok {
				delete(wt.pushed, t)
				delete(wt.unsure, t)
			}
		}
	}
	return wire.WatchAck{Watching: len(wt.versions)}, nil
}

func (cs *connState) addWatches(delta, limit int) error {
	cs.watchMu.Lock()
	defer cs.watchMu.Unlock()
	if delta > 0 && cs.watches+delta > limit {
		return wire.Errorf(wire.CodeOverloaded, "watching %d more topics would exceed the limit of %d per connection", delta, limit)
	}
	cs.watches += delta
	return nil
}

// mark makes the pusher look at topics again. It never blocks.
func (wt *watcher) mark(topics []string) {
	wt.pendMu.Lock()
	for _, t := range topics {
		wt.pending[t] = struct{}{}
	}
	wt.pendMu.Unlock()
	select {
	case wt.wake <- struct{}{}:
	default: // a wake-up is pending already; it sees these topics too
	}
}

func (wt *watcher) run() {
	defer wt.wg.Done()
	defer func() {
		// A bug while pushing ends this watch stream, not the node. The
		// stream is reset, so the client re-watches on a new one.
		if r := recover(); r != nil {
			wt.n.stats.panics.WithLabelValues(wire.TypeRouteEvent.String()).Inc()
			wt.n.log.Error("watch pusher panicked", "kind", wire.TypeRouteEvent.String(),
				"remote", wt.cs.peer.remote, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			wt.w.s.CancelWrite(codeStreamAbort)
			wt.w.s.CancelRead(codeStreamAbort)
		}
	}()
	for {
		select {
		case <-wt.done:
			return
		case <-wt.wake:
			if !wt.flush() {
				return
			}
		}
	}
}

// flush pushes the current route of every pending topic whose version
// differs from what the client has. It returns false once the stream
// cannot be written.
func (wt *watcher) flush() bool {
	wt.pendMu.Lock()
	pending := wt.pending
	wt.pending = make(map[string]struct{})
	wt.pendMu.Unlock()
	for topic := range pending {
		select {
		case <-wt.done:
			return false
		default:
		}
		wt.mu.Lock()
		have, watching := wt.versions[topic]
		_, force := wt.unsure[topic]
		attrs := wt.attrs
		wt.mu.Unlock()
		if !watching {
			continue
		}
		frame, version, ok := wt.event(topic, have, force, attrs)
		if !ok {
			continue
		}
		if wt.w.writeRaw(frame) != nil {
			return false
		}
		// Whatever the client named meanwhile, this push reaches it after
		// that, so it is what the client holds.
		wt.mu.Lock()
		if _, ok := wt.versions[topic]; ok {
			wt.versions[topic] = version
		}
		wt.pushed[topic] = version
		delete(wt.unsure, topic)
		wt.mu.Unlock()
	}
	return true
}

// event returns the route-event frame to push for topic to a client that
// has version have, and the version it carries; ok is false when there is
// nothing to push. With force the current route is pushed even when it is
// version have.
func (wt *watcher) event(topic string, have uint64, force bool, attrs wire.ClientAttrs) (frame []byte, version uint64, ok bool) {
	n := wt.n
	res := n.routeResult(wire.TopicVersion{Topic: topic, Version: have}, wt.cs.peer.ip, attrs)
	if force && res.Status == wire.StatusNotModified {
		res = n.routeResult(wire.TopicVersion{Topic: topic}, wt.cs.peer.ip, attrs)
	}
	switch res.Status {
	case wire.StatusNotModified:
		return nil, 0, false
	case wire.StatusWarmingUp, wire.StatusPolicyFailed:
		// Not known yet, perhaps only because brokers have not come back
		// since a restart: say nothing until warm-up ends, when every
		// topic is looked at again (markAll). A route policy that failed
		// closed: say nothing either; the client keeps what it has.
		return nil, 0, false
	case wire.StatusNotFound:
		if have == 0 && !force {
			return nil, 0, false // the client already knows there is no route
		}
	}
	var err error
	if res.Status == wire.StatusOK && wt.unfiltered(&res) {
		frame, err = n.watches.sharedFrame(&res, n.cfg.Clock.Now(), n.encodeRouteEvent)
	} else {
		frame, err = n.encodeRouteEvent(&res)
	}
	if err != nil {
		n.log.Error("encode route event", "topic", topic, "err", err)
		return nil, 0, false
	}
	return frame, res.Version, true
}

// unfiltered reports whether res carries the registry's own route of that
// version, the same bytes for every watcher. A route policy that changes a
// route gives it another version (a hash of the bytes it returns), so the
// versions alone tell.
func (wt *watcher) unfiltered(res *wire.RouteResult) bool {
	e, err := wt.n.reg.Route(res.Topic)
	return err == nil && e.Version == res.Version
}

// close stops the pusher and drops every subscription of the stream.
func (wt *watcher) close() {
	close(wt.done)
	wt.wg.Wait()
	wt.mu.Lock()
	defer wt.mu.Unlock()
	topics := make([]string, 0, len(wt.versions))
	for t := range wt.versions {
		topics = append(topics, t)
	}
	wt.n.watches.remove(wt, topics)
	wt.cs.addWatches(-len(topics), 0)
	wt.n.watches.mu.Lock()
	wt.n.watches.count--
	wt.n.watches.mu.Unlock()
}
