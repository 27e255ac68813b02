package node

import (
	"context"
	"errors"
	"fmt"
	"os"
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
// every change. The hub notes the changed topics and, on a goroutine of
// its own (so that the request that changed them is answered first),
// tells the pushers with watchers of them which changed: one goroutine
// per connection with watch streams, about 20 for 1,000 watchers. Each
// pusher marks its own watchers of those topics (adds the topics to each
// one's pending set and queues it), then flushes its queued watchers one
// after another, a turn of at most pushTurn topics each: for each pending
// topic it reads the route current at that moment and writes it to the
// watcher's stream. Written back to back, the events of one connection's
// watchers share packets, where a goroutine per watcher had the
// connection's send loop send a packet for each (1,000 watchers on 20
// connections: about 20 wake-ups and a few packets per connection instead
// of 1,000 of each). Marking on the pushers, not on the fan-out goroutine,
// has the first pusher writing at once instead of after all 1,000 watchers
// are marked, the pushers mark in parallel, and each watcher is marked
// right before it is flushed, its memory still in cache.
//
// Marking never blocks (the pending set is a set, a watcher is queued on
// its pusher at most once), so a slow or stalled watcher holds up nobody:
// not the registry, not the broker whose registration changed the routes,
// not other watchers. The pusher gives a write pushWait at most; a stream
// that does not take its event in that time (its reader stopped, or its
// flow-control window is full) is handed to a catch-up goroutine of its
// own, which writes with the full write timeout while the pusher goes on
// with the others, and hands the watcher back once nothing is pending; so
// is one whose stream is busy writing something else (an answer of its
// request loop): the pusher never waits for a stream's lock. It
// loses nothing either: a topic marked while a write is in progress stays
// pending, so the watcher's flusher comes back to it and pushes the route
// current then (etcd keeps its slow "victim" watchers the same way; here
// the backlog is bounded by the watched topics, not by the number of
// changes). A watcher that cannot write for the write timeout loses its
// stream, and with it the watch.
//
// A push the route policy failed closed for (its instances busy, a call
// past its deadline) is tried again: the watcher's retry timer marks the
// topic again after 100 ms, doubling while it keeps failing, up to 30 s
// (watcher.retryLater), since nothing else would look at it until its
// route or the policy next changes.
//
// Encoding: a route event without a route policy applied is the same bytes
// for every watcher of that (topic, version), so it is encoded once and
// shared (watchHub.sharedFrame). A watcher whose route a policy changed
// (its version differs from the registry's) gets its own event, encoded
// for it.
//
// Lock order, outer to inner:
//
//	watcher.flushMu  →  watcher.mu  →  watchHub.mu
//	watcher.flushMu  →  watcher.pendMu
//	watcher.flushMu  →  streamWriter.mu
//	watcher.mu  →  watcher.pendMu, watcher.mu  →  connPusher.mu   (mark, from watch and unwatch)
//	watcher.flushMu  →  connPusher.mu   (a flush ending its turn queues the watcher again)
//	watcher.mu  →  connState.watchMu   (watch limits, remember)
//	watcher.flushMu  →  the registry's locks (registry.mu, then its
//	leaseMu) and the route policy's, for the route a push reads (event,
//	and the freshness of routeEvent): the registry calls changed with no
//	lock of its own held and never calls into the hub otherwise, so none
//	of its locks is ever held around one of these.
//	watchHub.fanMu is a leaf: changed and fanOut take nothing under it.
//	The retry timer (retryNow) takes watcher.pendMu and releases it
//	before it marks, which takes watcher.pendMu and connPusher.mu in turn.
//	watchHub.mu  →  connPusher.mu is never taken: the hub only counts a
//	pusher's users under its mu, and mark tells the pushers after
//	releasing it; a pusher marking its watchers (markChanged) takes
//	connPusher.mu, watchHub.mu and watcher.pendMu one at a time.
//	connPusher.mu, connState.watchMu and streamWriter.mu are leaves, but
//	for one hand-off: a pusher write that timed out after the stream took
//	part of a frame keeps streamWriter.mu locked for the watcher's catch-up
//	goroutine, which writes the rest of the frame before anything else is
//	written to the stream, and unlocks it; it takes no lock meanwhile.
//
// The hub never takes a watcher's mu: markAll and the pushers copy the
// subscribers under hub.mu and mark them after releasing it. watch, unwatch
// and close hold watcher.mu while they add or remove subscriptions. Exactly
// one goroutine flushes a watcher at a time, under flushMu: its
// connection's pusher while watcher.slow is false, its catch-up goroutine
// while it is true.

// watchHub routes the registry's change notices to the watchers of each
// topic.
type watchHub struct {
	mu sync.Mutex
	// byTopic holds the watchers of each topic by their connection's
	// pusher, so that a change is told to the pushers (about 20 for 1,000
	// watchers) and each marks its own watchers.
	byTopic map[string]map[*connPusher]map[*watcher]struct{}
	// watched is len(byTopic), for changed to read without mu: a node
	// nobody watches skips the fan-out (a registration storm's changes).
	watched atomic.Int64
	count   int // watch streams
	// events holds the encoded route-event frame of each watched topic's
	// latest version, shared by every watcher no route policy changes the
	// route for: the event is encoded once per (topic, version), not once
	// per watcher. Entries go when their topic's last watcher does.
	events map[string]*sharedEvent
	// pushers holds the pusher of each connection with watch streams.
	pushers map[*connState]*connPusher

	// fanTopics are the changed topics whose watchers the fan-out
	// goroutine has yet to mark; fanning is set while it runs.
	fanMu     sync.Mutex
	fanTopics map[string]struct{}
	fanning   bool
	// touched is the fan-out goroutine's own (mark): the pushers told of
	// the changed topics.
	touched []*connPusher

	encodes  atomic.Uint64 // shared events encoded, for tests
	handOffs atomic.Uint64 // watchers handed to catchUp, for tests
}

// sharedEvent is one topic version's route-event frame, encoded by the
// first watcher that needs it.
type sharedEvent struct {
	version uint64
	at      time.Time // when it was made: its freshness ages are from then
	once    sync.Once
	encoded atomic.Bool // frame and err are set
	frame   []byte
	err     error
}

func newWatchHub() *watchHub {
	return &watchHub{
		byTopic: make(map[string]map[*connPusher]map[*watcher]struct{}),
		events:  make(map[string]*sharedEvent),
		pushers: make(map[*connState]*connPusher),

		fanTopics: make(map[string]struct{}),
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
	for _, byCP := range h.byTopic {
		for _, ws := range byCP {
			n += len(ws)
		}
	}
	return n
}

// changed is the registry's OnChange hook, called on the goroutine of the
// request that changed the routes, before that request is answered. It
// only notes the topics (a set, so it is bounded by the topics, not by the
// changes) and starts the hub's fan-out goroutine if none is running,
// which marks their watchers: marking 1,000 watchers took the request
// about half a millisecond, and its answer waited for it. The answer still
// means the change is applied (the registry has it; every push reads the
// route current when it is written), and no final version is lost: topics
// noted while a fan-out runs are marked by it before it ends.
func (h *watchHub) changed(topics []string) {
	// Nothing lost when nobody watches: a watch subscribes (add) before it
	// reads the routes it pushes first, so one that subscribes after this
	// load reads a route that already has the change.
	if h.watched.Load() == 0 {
		return
	}
	h.fanMu.Lock()
	for _, t := range topics {
		h.fanTopics[t] = struct{}{}
	}
	start := !h.fanning
	h.fanning = true
	h.fanMu.Unlock()
	if start {
		go h.fanOut()
	}
}

// fanOut marks the watchers of the noted topics until none are left.
func (h *watchHub) fanOut() {
	var topics []string
	for {
		h.fanMu.Lock()
		if len(h.fanTopics) == 0 {
			h.fanning = false
			h.fanMu.Unlock()
			return
		}
		topics = topics[:0]
		for t := range h.fanTopics {
			topics = append(topics, t)
		}
		clear(h.fanTopics)
		h.fanMu.Unlock()
		h.mark(topics)
	}
}

// mark tells the pushers with watchers of topics which of them changed;
// each pusher marks its own watchers of those (connPusher.markChanged).
// Marking 1,000 watchers here took about 0.3 ms, one watcher after
// another in cold memory, and no pusher could start meanwhile; told per
// pusher, the first starts at once, they mark their watchers in parallel,
// each right before it writes to them, and a pusher woken once writes all
// of its connection's events back to back, into shared packets. Only the
// fan-out goroutine calls it (one at a time: watchHub.fanning), which is
// what lets it reuse h.touched and each pusher's noted.
func (h *watchHub) mark(topics []string) {
	h.mu.Lock()
	for _, t := range topics {
		for cp := range h.byTopic[t] {
			if len(cp.noted) == 0 {
				h.touched = append(h.touched, cp)
			}
			cp.noted = append(cp.noted, t)
		}
	}
	h.mu.Unlock()
	for i, cp := range h.touched {
		cp.noteChanged(cp.noted)
		clear(cp.noted)
		cp.noted = cp.noted[:0]
		h.touched[i] = nil
	}
	h.touched = h.touched[:0]
}

// subscribers appends cp's watchers of topic to ws.
func (h *watchHub) subscribers(ws []*watcher, topic string, cp *connPusher) []*watcher {
	h.mu.Lock()
	for w := range h.byTopic[topic][cp] {
		ws = append(ws, w)
	}
	h.mu.Unlock()
	return ws
}

// markAll makes every watcher look at every topic it watches again.
func (h *watchHub) markAll() {
	h.mu.Lock()
	marks := make(map[*watcher][]string)
	for t, byCP := range h.byTopic {
		for _, ws := range byCP {
			for w := range ws {
				marks[w] = append(marks[w], t)
			}
		}
	}
	h.mu.Unlock()
	for w, ts := range marks {
		w.mark(ts)
	}
}

// attach returns the pusher of cs, starting it for the connection's first
// watch stream.
func (h *watchHub) attach(cs *connState) *connPusher {
	h.mu.Lock()
	defer h.mu.Unlock()
	cp := h.pushers[cs]
	if cp == nil {
		cp = &connPusher{hub: h, changed: make(map[string]struct{}), wake: make(chan struct{}, 1), done: make(chan struct{})}
		h.pushers[cs] = cp
		go cp.run()
	}
	cp.users++
	return cp
}

// detach stops cp once its connection's last watch stream is closed.
func (h *watchHub) detach(cs *connState, cp *connPusher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cp.users--; cp.users == 0 {
		if h.pushers[cs] == cp {
			delete(h.pushers, cs)
		}
		close(cp.done)
	}
}

func (h *watchHub) add(w *watcher, topics []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range topics {
		byCP := h.byTopic[t]
		if byCP == nil {
			byCP = make(map[*connPusher]map[*watcher]struct{})
			h.byTopic[t] = byCP
		}
		ws := byCP[w.cp]
		if ws == nil {
			ws = make(map[*watcher]struct{})
			byCP[w.cp] = ws
		}
		ws[w] = struct{}{}
	}
	h.watched.Store(int64(len(h.byTopic)))
}

func (h *watchHub) remove(w *watcher, topics []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range topics {
		byCP := h.byTopic[t]
		if byCP == nil {
			continue
		}
		if ws := byCP[w.cp]; ws != nil {
			delete(ws, w)
			if len(ws) == 0 {
				delete(byCP, w.cp)
			}
		}
		if len(byCP) == 0 {
			delete(h.byTopic, t)
			delete(h.events, t)
		}
	}
	h.watched.Store(int64(len(h.byTopic)))
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
	if e.encoded.Load() {
		return e.frame, e.err
	}
	return h.encodeShared(e, *res, encode)
}

// encodeShared encodes e outside the hub's lock: the first watcher
// encodes, the others of this version wait for it in once.Do. (A function
// of its own, so that only the encoding watcher's route result escapes to
// the heap, not every watcher's.)
func (h *watchHub) encodeShared(e *sharedEvent, res wire.RouteResult, encode func(*wire.RouteResult) ([]byte, error)) ([]byte, error) {
	e.once.Do(func() {
		h.encodes.Add(1)
		e.frame, e.err = encode(&res)
		e.encoded.Store(true)
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
	cp *connPusher // the connection's pusher

	mu       sync.Mutex
	versions map[string]uint64 // topic -> version the client has
	// watches counts the stream's watch requests, for a flush to tell one
	// that came while it pushed (delivered).
	watches uint64
	attrs   wire.ClientAttrs // from the latest watch request
	// pushed is the version last pushed per topic, kept for a while after
	// an unwatch (see watch); unsure lists topics whose version the client
	// holds the node cannot tell, because a push crossed the watch that
	// named it: their current route is pushed whatever its version.
	pushed map[string]uint64
	unsure map[string]struct{}
	// idle counts the topics of pushed the stream no longer watches; the
	// connection's streams together remember at most its watch cap of
	// them (connState.remembered), however often they watch and unwatch.
	idle int
	// peak is the most topics versions held since its maps were last made
	// anew (unwatch, shrinkMaps): Go's maps keep the memory of their
	// largest size.
	peak int

	pendMu  sync.Mutex
	pending map[string]struct{} // topics to look at again
	// shrink asks the flusher to make pending and taking anew, once an
	// unwatch left the watcher with far fewer topics than they grew for.
	shrink bool
	// slow is set while the catch-up goroutine, not the connection's
	// pusher, flushes the watcher (and for good once its stream failed).
	slow bool
	// retry holds the topics whose push the route policy failed closed
	// for, to be marked again when retryTimer fires (policyRetry).
	retry      map[string]struct{}
	retryTimer *time.Timer

	queued bool // on cp's queue; under cp.mu

	// flushMu is held by whoever flushes: cp's goroutine or catchUp.
	flushMu sync.Mutex
	taking  map[string]struct{} // the pending set being flushed, reused
	// rest is the tail of a frame the stream took only in part, with the
	// topic and version it carries; catchUp writes it first (w.mu is
	// held for it meanwhile, see the lock order).
	rest        []byte
	restTopic   string
	restVersion uint64
	restSeen    uint64 // watches when the frame's version was read
	// failing holds the watched topics whose last push the route policy
	// failed closed for; retryDelay is the wait before their next retry,
	// doubling while they keep failing, cleared once none is left.
	failing    map[string]struct{}
	retryDelay time.Duration

	done chan struct{}
	wg   sync.WaitGroup // catchUp
}

// connPusher flushes the queued watchers of one connection, one after
// another.
type connPusher struct {
	hub   *watchHub
	mu    sync.Mutex
	queue []*watcher // each at most once (watcher.queued)
	// changed are the topics the fan-out told of whose watchers on this
	// connection the pusher has yet to mark (a set: bounded by the
	// topics, not by the changes).
	changed map[string]struct{}
	wake    chan struct{}
	done    chan struct{}
	users   int // watch streams on the connection; under watchHub.mu

	noted []string // the fan-out goroutine's own (watchHub.mark)
	// topics and subs are the pusher goroutine's own (markChanged).
	topics []string
	subs   []*watcher
}

// pushTurn is how many pending topics of one watcher the pusher looks at
// before it goes on to the connection's next watcher, so that a watcher of
// thousands of topics does not hold up one of a few.
const pushTurn = 64

// pushWait is how long the pusher lets one write wait for the stream to
// take it before it hands the watcher to a catch-up goroutine. A healthy
// stream takes an event of up to a packet at once (quic-go copies it and
// returns); a larger one, or one behind others of the same stream, waits
// for the connection's send loop, which on a healthy connection takes it
// well within pushWait. A hand-off is correct whatever the reason: it only
// moves the watcher's writes to a goroutine of its own for a while.
const pushWait = 2 * time.Millisecond

func (cp *connPusher) enqueue(wt *watcher) {
	cp.mu.Lock()
	if !wt.queued {
		wt.queued = true
		cp.queue = append(cp.queue, wt)
	}
	cp.mu.Unlock()
	cp.wakeUp()
}

// noteChanged has the pusher mark its watchers of topics.
func (cp *connPusher) noteChanged(topics []string) {
	cp.mu.Lock()
	for _, t := range topics {
		cp.changed[t] = struct{}{}
	}
	cp.mu.Unlock()
	cp.wakeUp()
}

// markChanged marks the pusher's watchers of the topics noteChanged told
// of and queues them (but those a catch-up goroutine has, which sees the
// topics before it hands them back), on the pusher's goroutine.
func (cp *connPusher) markChanged() {
	cp.mu.Lock()
	topics := cp.topics[:0]
	for t := range cp.changed {
		topics = append(topics, t)
	}
	clear(cp.changed)
	cp.mu.Unlock()
	if len(topics) == 0 {
		return
	}
	marked := cp.subs[:0]
	for i := range topics {
		subs := cp.hub.subscribers(marked, topics[i], cp)
		marked = subs[:len(marked)]
		for _, w := range subs[len(marked):] {
			if w.markPending(topics[i : i+1]) {
				marked = append(marked, w)
			}
		}
		clear(subs[len(marked):])
	}
	cp.mu.Lock()
	for _, wt := range marked {
		if !wt.queued {
			wt.queued = true
			cp.queue = append(cp.queue, wt)
		}
	}
	cp.mu.Unlock()
	clear(marked)
	cp.subs = marked[:0]
	clear(topics)
	cp.topics = topics[:0]
}

func (cp *connPusher) wakeUp() {
	select {
	case cp.wake <- struct{}{}:
	default: // a wake-up is pending already; it sees these watchers too
	}
}

func (cp *connPusher) run() {
	var batch []*watcher
	for {
		select {
		case <-cp.done:
			return
		case <-cp.wake:
		}
		cp.markChanged()
		cp.mu.Lock()
		batch, cp.queue = cp.queue, batch[:0]
		for _, wt := range batch {
			wt.queued = false
		}
		cp.mu.Unlock()
		for i, wt := range batch {
			wt.push()
			batch[i] = nil
		}
	}
}

func (n *Node) newWatcher(cs *connState, w *streamWriter) *watcher {
	wt := &watcher{
		n: n, cs: cs, w: w,
		versions: make(map[string]uint64),
		pushed:   make(map[string]uint64),
		unsure:   make(map[string]struct{}),
		pending:  make(map[string]struct{}),
		taking:   make(map[string]struct{}),
		done:     make(chan struct{}),
	}
	wt.cp = n.watches.attach(cs)
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
	wt.watches++
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
	// Only a watch that is taken changes the attrs the stream's pushes are
	// filtered with: one refused changes nothing (PROTOCOL.md 11).
	wt.attrs = q.Client
	n.watches.add(wt, added)
	recalled := 0 // topics pushed before an unwatch, watched again
	for _, t := range added {
		if _, ok := wt.pushed[t]; ok {
			recalled++
		}
	}
	wt.remember(-recalled)
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
	wt.peak = max(wt.peak, len(wt.versions))
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
	kept := 0
	for _, t := range q.Topics {
		if _, ok := wt.versions[t]; ok {
			delete(wt.versions, t)
			removed = append(removed, t)
			if _, ok := wt.pushed[t]; ok {
				kept++
			}
		}
	}
	n.watches.remove(wt, removed)
	cs.addWatches(-len(removed), n.cfg.MaxWatchesPerConn)
	// What was pushed for unwatched topics is remembered so a re-watch
	// can tell a crossing push (see watch), within a bound: past it the
	// unwatched ones are forgotten and a re-watch trusts the version named.
	// The bound is the connection's watch cap, over all its streams: each
	// stream bounding only its own let a client that watched and unwatched
	// on stream after stream have the node keep every name it named.
	if wt.remember(kept) > n.cfg.MaxWatchesPerConn || len(wt.pushed) > len(wt.versions)+MaxTopicsPerQuery {
		for t := range wt.pushed {
			if _, ok := wt.versions[t]; !ok {
				delete(wt.pushed, t)
				delete(wt.unsure, t)
			}
		}
		wt.remember(-wt.idle)
	}
	wt.shrinkMaps()
	return wire.WatchAck{Watching: len(wt.versions)}, nil
}

// shrinkFrom is the size from which a watcher's maps are made anew once
// it watches a quarter of what they grew for (shrinkMaps).
const shrinkFrom = 256

// shrinkMaps makes the watcher's maps anew, sized for what they hold,
// when it watches no more than a quarter of the most it watched and that
// was shrinkFrom or more: Go's maps keep the memory of their largest size,
// so a stream that watched 10,000 topics and unwatched them would keep
// about a megabyte, and a client could have every stream of its
// connections do so, each within the watch cap. versions, pushed and
// unsure are made anew here; pending and taking by the flusher, which owns
// them, asked to by a look at nothing. With wt.mu held.
func (wt *watcher) shrinkMaps() {
	if wt.peak < shrinkFrom || len(wt.versions) > wt.peak/4 {
		return
	}
	wt.versions = shrunk(wt.versions)
	wt.pushed = shrunk(wt.pushed)
	wt.unsure = shrunk(wt.unsure)
	wt.peak = len(wt.versions)
	wt.pendMu.Lock()
	wt.shrink = true
	wt.pendMu.Unlock()
	wt.mark(nil)
}

// shrunk returns a new map with m's entries, sized for them (maps.Clone
// may keep the size m grew to).
func shrunk[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// remember counts delta more (or fewer) remembered topics the stream no
// longer watches, on the watcher and its connection, and returns the
// connection's count. With wt.mu held.
func (wt *watcher) remember(delta int) int {
	wt.idle += delta
	cs := wt.cs
	cs.watchMu.Lock()
	defer cs.watchMu.Unlock()
	cs.remembered += delta
	return cs.remembered
}

// addWatches counts delta more (or fewer) watched topics on the
// connection, refusing more past limit per connection, past its source
// IP's share of the node's watches or past the node's (--max-watches).
func (cs *connState) addWatches(delta, limit int) error {
	cs.watchMu.Lock()
	defer cs.watchMu.Unlock()
	switch {
	case delta > 0 && cs.watches+delta > limit:
		return wire.Errorf(wire.CodeOverloaded, "watching %d more topics would exceed the limit of %d per connection", delta, limit)
	case delta > 0 && !cs.watchBudget.tryAcquire(int64(delta)):
		return wire.Errorf(wire.CodeOverloaded, "watching %d more topics would exceed --max-watches: %d over the node, of which the readers of one source IP may hold a quarter", delta, cs.watchBudget.all.size)
	case delta < 0:
		cs.watchBudget.release(int64(-delta))
	}
	cs.watches += delta
	return nil
}

// mark makes the watcher's flusher look at topics again. It never blocks.
func (wt *watcher) mark(topics []string) {
	if wt.markPending(topics) {
		wt.cp.enqueue(wt)
	}
}

// markPending adds topics to the pending set and reports whether the
// watcher is to be queued on its pusher: not while catchUp has it, which
// sees these topics before it hands the watcher back.
func (wt *watcher) markPending(topics []string) bool {
	wt.pendMu.Lock()
	for _, t := range topics {
		wt.pending[t] = struct{}{}
	}
	slow := wt.slow
	wt.pendMu.Unlock()
	return !slow
}

// closed reports whether close has begun.
func (wt *watcher) closed() bool {
	select {
	case <-wt.done:
		return true
	default:
		return false
	}
}

// push is the pusher's flush of wt, unless catchUp has it. slow is looked
// at before flushMu, which catchUp holds while it waits for a write: only
// the pusher sets slow, and catchUp clears it after its last flush, so
// while it is clear nobody else flushes.
func (wt *watcher) push() {
	wt.pendMu.Lock()
	slow := wt.slow
	wt.pendMu.Unlock()
	if slow {
		return
	}
	wt.flushMu.Lock()
	defer wt.flushMu.Unlock()
	if wt.closed() {
		return
	}
	defer wt.recoverPanic()
	if !wt.flush(false) {
		// The stream failed (and stopped being read: failLocked):
		// nobody pushes to it again.
		wt.setSlow()
	}
}

// recoverPanic ends the watch stream, not the node, when pushing to it
// panicked: the stream is reset, so the client re-watches on a new one.
func (wt *watcher) recoverPanic() {
	r := recover()
	if r == nil {
		return
	}
	wt.setSlow()
	wt.n.stats.panics.WithLabelValues(wire.TypeRouteEvent.String()).Inc()
	wt.n.log.Error("watch pusher panicked", "kind", wire.TypeRouteEvent.String(),
		"remote", wt.cs.peer.remote, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	wt.w.s.CancelWrite(codeStreamAbort)
	wt.w.s.CancelRead(codeStreamAbort)
}

func (wt *watcher) setSlow() {
	wt.pendMu.Lock()
	wt.slow = true
	wt.pendMu.Unlock()
}

// catchUp flushes a watcher whose stream did not take an event within
// pushWait, with the full write timeout, until nothing is pending; then it
// hands the watcher back to the pusher.
func (wt *watcher) catchUp() {
	defer wt.wg.Done()
	defer wt.recoverPanic()
	// wt.rest is read here only: once the watcher is handed back, the
	// pusher may set it again for the next catch-up.
	if rest := wt.rest; rest != nil {
		wt.rest = nil
		if wt.w.finishLocked(rest) != nil { // unlocks w.mu, even in a panic
			return
		}
		wt.delivered(wt.restTopic, wt.restVersion, wt.restSeen)
	}
	for !wt.closed() {
		wt.flushMu.Lock()
		ok := wt.flush(true)
		wt.flushMu.Unlock()
		if !ok {
			return
		}
		wt.pendMu.Lock()
		if len(wt.pending) == 0 {
			wt.slow = false
			wt.pendMu.Unlock()
			return
		}
		wt.pendMu.Unlock()
	}
}

// flush pushes the current route of every pending topic whose version
// differs from what the client has. patient writes wait the write timeout
// (catchUp); otherwise (the pusher) a write the stream does not take
// within pushWait hands the watcher to catchUp, with what is left. It
// returns false once the stream cannot be written.
func (wt *watcher) flush(patient bool) bool {
	wt.pendMu.Lock()
	wt.pending, wt.taking = wt.taking, wt.pending
	wt.pendMu.Unlock()
	defer wt.endFlush()
	looked := 0
	for topic := range wt.taking {
		if !patient && looked == pushTurn && len(wt.taking) > 0 {
			// The others of the connection get their turn first.
			wt.pendMu.Lock()
			for t := range wt.taking {
				wt.pending[t] = struct{}{}
			}
			wt.pendMu.Unlock()
			wt.cp.enqueue(wt)
			return true
		}
		looked++
		delete(wt.taking, topic)
		if wt.closed() {
			return false
		}
		wt.mu.Lock()
		have, watching := wt.versions[topic]
		_, force := wt.unsure[topic]
		attrs := wt.attrs
		seen := wt.watches
		wt.mu.Unlock()
		if !watching {
			wt.succeeded(topic) // not retried any more
			continue
		}
		if testHookFlush != nil {
			testHookFlush(attrs)
		}
		frame, version, ok := wt.event(topic, have, force, attrs)
		if !ok {
			continue
		}
		if patient {
			if wt.w.writeRaw(frame) != nil {
				return false
			}
		} else {
			took, err := wt.w.writeSoon(frame, pushWait)
			if err != nil {
				return false
			}
			if took < len(frame) {
				wt.handOff(topic, frame[took:], version, seen, took > 0)
				return true
			}
		}
		if testHookPushed != nil {
			testHookPushed(topic)
		}
		wt.delivered(topic, version, seen)
	}
	return true
}

// endFlush empties taking at the end of a flush, and makes it and pending
// anew when shrinkMaps asked for it. With flushMu held.
func (wt *watcher) endFlush() {
	clear(wt.taking)
	wt.pendMu.Lock()
	defer wt.pendMu.Unlock()
	if wt.shrink {
		wt.shrink = false
		wt.taking = make(map[string]struct{})
		wt.pending = shrunk(wt.pending)
	}
}

// testHookFlush, when set, runs before each topic a flush looks at, with
// the watcher's client attributes; tests use it to make one watcher panic.
var testHookFlush func(wire.ClientAttrs)

// testHookPushed, when set, runs once a flush wrote a topic's event in
// whole, before it notes the push; tests use it to cross a push with a
// watch.
var testHookPushed func(topic string)

// handOff gives the watcher to a new catch-up goroutine: topic's frame
// was taken up to rest (with w.mu kept locked if partly), and what is
// still in wt.taking goes back to pending.
func (wt *watcher) handOff(topic string, rest []byte, version, seen uint64, partly bool) {
	wt.pendMu.Lock()
	for t := range wt.taking {
		wt.pending[t] = struct{}{}
	}
	if partly {
		wt.rest, wt.restTopic, wt.restVersion, wt.restSeen = rest, topic, version, seen
	} else {
		wt.pending[topic] = struct{}{}
	}
	wt.slow = true
	wt.pendMu.Unlock()
	wt.n.watches.handOffs.Add(1)
	wt.wg.Add(1) // before close's Wait: close takes flushMu first, held here
	go wt.catchUp()
}

// The retries of a push the route policy failed closed for wait from
// policyRetryMin, doubling while they fail, up to policyRetryMax: a
// policy that fails for a while is tried again soon, one that keeps
// failing for a watcher costs a guest call per topic every 30 s at most.
// They stop when a push succeeds, the topic is unwatched (flush skips it)
// or the stream ends.
const (
	policyRetryMin = 100 * time.Millisecond
	policyRetryMax = 30 * time.Second
)

// retryLater has topic looked at again after the retry delay, under
// flushMu (event, from flush).
func (wt *watcher) retryLater(topic string) {
	if wt.failing == nil {
		wt.failing = make(map[string]struct{})
	}
	wt.failing[topic] = struct{}{}
	wt.pendMu.Lock()
	defer wt.pendMu.Unlock()
	if wt.closed() {
		return
	}
	if wt.retry == nil {
		wt.retry = make(map[string]struct{})
	}
	wt.retry[topic] = struct{}{}
	if wt.retryTimer != nil {
		return // armed: it marks this topic too
	}
	wt.retryDelay = min(max(2*wt.retryDelay, policyRetryMin), policyRetryMax)
	wt.retryTimer = time.AfterFunc(wt.retryDelay, wt.retryNow)
}

// succeeded notes that topic needs no retry, under flushMu; the retry
// delay starts again from policyRetryMin once no topic is failing.
func (wt *watcher) succeeded(topic string) {
	if len(wt.failing) == 0 {
		return
	}
	delete(wt.failing, topic)
	if len(wt.failing) == 0 {
		wt.failing, wt.retryDelay = nil, 0
	}
}

// retryNow marks the topics retryLater noted, on the timer's goroutine.
func (wt *watcher) retryNow() {
	wt.pendMu.Lock()
	topics := make([]string, 0, len(wt.retry))
	for t := range wt.retry {
		topics = append(topics, t)
	}
	wt.retry, wt.retryTimer = nil, nil
	wt.pendMu.Unlock()
	if !wt.closed() {
		wt.mark(topics)
	}
}

// stopRetries stops a retry timer armed, once the watcher is closed.
func (wt *watcher) stopRetries() {
	wt.pendMu.Lock()
	if wt.retryTimer != nil {
		wt.retryTimer.Stop()
		wt.retry, wt.retryTimer = nil, nil
	}
	wt.pendMu.Unlock()
}

// delivered notes that the event of version was written for topic, read
// for it when the stream had had seen watch requests.
func (wt *watcher) delivered(topic string, version, seen uint64) {
	// A watch that came before the push was written named a version the
	// client held before this push, which reaches it after: the push is
	// what it holds. A watch that came while the push was being written
	// and noted may have been sent after the client read it, naming
	// another version on purpose: which one the client holds the node
	// cannot tell, so its current route is pushed again, whatever its
	// version (unsure; the watch marked the topic). Nothing tells the two
	// apart, and one push too many is the price of never one too few.
	wt.mu.Lock()
	if _, ok := wt.versions[topic]; ok {
		wt.versions[topic] = version
	}
	if _, ok := wt.versions[topic]; !ok {
		if _, had := wt.pushed[topic]; !had {
			wt.remember(1) // a push that crossed the topic's unwatch
		}
	}
	wt.pushed[topic] = version
	if wt.watches != seen {
		wt.unsure[topic] = struct{}{}
	} else {
		delete(wt.unsure, topic)
	}
	wt.mu.Unlock()
}

// event returns the route-event frame to push for topic to a client that
// has version have, and the version it carries; ok is false when there is
// nothing to push. With force the current route is pushed even when it is
// version have.
// Under flushMu (flush).
func (wt *watcher) event(topic string, have uint64, force bool, attrs wire.ClientAttrs) (frame []byte, version uint64, ok bool) {
	n := wt.n
	// One registry lookup serves the read and the question whether the
	// result is the registry's own route (routeRead returns the route it
	// answered unfiltered, nil otherwise): asking the registry again
	// cost a second read lock per delivery, and could see a newer
	// version than the one read.
	e, _ := n.reg.Route(topic)
	res, own := n.routeRead(context.Background(), wire.TopicVersion{Topic: topic, Version: have}, e, wt.cs.peer.ip, attrs)
	if force && res.Status == wire.StatusNotModified {
		res, own = n.routeRead(context.Background(), wire.TopicVersion{Topic: topic}, e, wt.cs.peer.ip, attrs)
	}
	n.stats.routeReads[res.Status].Inc()
	if res.Status != wire.StatusPolicyFailed {
		wt.succeeded(topic)
	}
	switch res.Status {
	case wire.StatusNotModified:
		return nil, 0, false
	case wire.StatusWarmingUp:
		// Not known yet, perhaps only because brokers have not come back
		// since a restart: say nothing until warm-up ends, when every
		// topic is looked at again (markAll).
		return nil, 0, false
	case wire.StatusPolicyFailed:
		// A route policy that failed closed: say nothing now (the client
		// keeps what it has) and try again later. Its failure may pass
		// without the route or the policy changing (its instances were
		// busy, a call missed its deadline on a loaded node), and nothing
		// else would look at the topic again.
		wt.retryLater(topic)
		return nil, 0, false
	case wire.StatusNotFound:
		if have == 0 && !force {
			return nil, 0, false // the client already knows there is no route
		}
	}
	var err error
	if res.Status == wire.StatusOK && own != nil {
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

// close stops pushing and drops every subscription of the stream.
func (wt *watcher) close() {
	close(wt.done)
	wt.stopRetries()
	// A flush in progress sees done between topics; a write of the
	// pusher's waits pushWait at most, catchUp's the write timeout.
	wt.flushMu.Lock()
	wt.flushMu.Unlock()
	wt.wg.Wait()
	wt.mu.Lock()
	defer wt.mu.Unlock()
	topics := make([]string, 0, len(wt.versions))
	for t := range wt.versions {
		topics = append(topics, t)
	}
	wt.n.watches.remove(wt, topics)
	wt.cs.addWatches(-len(topics), 0)
	wt.remember(-wt.idle)
	wt.n.watches.mu.Lock()
	wt.n.watches.count--
	wt.n.watches.mu.Unlock()
	wt.n.watches.detach(wt.cs, wt.cp)
}

// writeSoon writes an encoded frame unless the stream does not take it
// within wait; it returns how many bytes the stream took. When that is
// only part of the frame, w.mu stays locked: nothing else may be written
// before the rest, which the caller writes with finishLocked. A write
// that merely waited too long leaves the stream usable.
//
// A stream whose writer is busy (its request loop writing an answer, which
// waits up to the write timeout for a peer that does not read) takes
// nothing: writeSoon does not wait for w.mu, or the connection's pusher
// would wait with it, and every other watcher of the connection too.
func (w *streamWriter) writeSoon(buf []byte, wait time.Duration) (int, error) {
	if !w.mu.TryLock() {
		return 0, nil
	}
	if w.failed != nil {
		w.mu.Unlock()
		return 0, w.failed
	}
	w.s.SetWriteDeadline(time.Now().Add(wait))
	n, err := w.s.Write(buf)
	switch {
	case err == nil || n == len(buf):
		n = len(buf)
	case errors.Is(err, os.ErrDeadlineExceeded):
		if n > 0 {
			return n, nil // w.mu is the caller's now
		}
	default:
		w.failLocked(err)
		w.mu.Unlock()
		return 0, err
	}
	w.mu.Unlock()
	return n, nil
}

// finishLocked writes the rest of a frame writeSoon took in part, with the
// write timeout, and unlocks w.mu.
func (w *streamWriter) finishLocked(rest []byte) error {
	defer w.mu.Unlock()
	return w.writeLocked(rest)
}
