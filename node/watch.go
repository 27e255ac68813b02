package node

import (
	"sync"

	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
)

// watchHub routes the registry's change notices to the watchers of each
// topic.
type watchHub struct {
	mu      sync.Mutex
	byTopic map[string]map[*watcher]struct{}
	count   int // watch streams
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

func newWatchHub() *watchHub {
	return &watchHub{byTopic: make(map[string]map[*watcher]struct{})}
}

// changed is the registry's OnChange hook. It only marks watchers; each
// watcher's own goroutine reads and pushes the new routes, so a slow client
// never holds up the registry or other clients.
func (h *watchHub) changed(topics []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range topics {
		for w := range h.byTopic[t] {
			w.mark(t)
		}
	}
}

// markAll makes every watcher look at every topic it watches again.
func (h *watchHub) markAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for topic, ws := range h.byTopic {
		for w := range ws {
			w.mark(topic)
		}
	}
}

func (h *watchHub) add(w *watcher, topic string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.byTopic[topic]
	if ws == nil {
		ws = make(map[*watcher]struct{})
		h.byTopic[topic] = ws
	}
	ws[w] = struct{}{}
}

func (h *watchHub) remove(w *watcher, topic string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ws := h.byTopic[topic]; ws != nil {
		delete(ws, w)
		if len(ws) == 0 {
			delete(h.byTopic, topic)
		}
	}
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
	pending  map[string]struct{}

	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

func (n *Node) newWatcher(cs *connState, w *streamWriter) *watcher {
	wt := &watcher{
		n: n, cs: cs, w: w,
		versions: make(map[string]uint64),
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
	added := 0
	for _, tv := range q.Topics {
		if _, ok := wt.versions[tv.Topic]; !ok {
			added++
		}
	}
	if err := cs.addWatches(added, n.cfg.MaxWatchesPerConn); err != nil {
		return nil, err
	}
	for _, tv := range q.Topics {
		if _, ok := wt.versions[tv.Topic]; !ok {
			n.watches.add(wt, tv.Topic)
		}
		wt.versions[tv.Topic] = tv.Version
		wt.pending[tv.Topic] = struct{}{}
	}
	wt.signal()
	return wire.WatchAck{Watching: len(wt.versions)}, nil
}

func (n *Node) unwatch(cs *connState, wt *watcher, q *wire.Unwatch) (any, error) {
	if wt == nil {
		return wire.WatchAck{}, nil
	}
	wt.mu.Lock()
	defer wt.mu.Unlock()
	for _, t := range q.Topics {
		if _, ok := wt.versions[t]; ok {
			delete(wt.versions, t)
			delete(wt.pending, t)
			n.watches.remove(wt, t)
			cs.addWatches(-1, n.cfg.MaxWatchesPerConn)
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

func (wt *watcher) mark(topic string) {
	wt.mu.Lock()
	wt.pending[topic] = struct{}{}
	wt.mu.Unlock()
	wt.signal()
}

func (wt *watcher) signal() {
	select {
	case wt.wake <- struct{}{}:
	default:
	}
}

func (wt *watcher) run() {
	defer wt.wg.Done()
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
	wt.mu.Lock()
	pending := wt.pending
	wt.pending = make(map[string]struct{})
	wt.mu.Unlock()
	for topic := range pending {
		wt.mu.Lock()
		have, watching := wt.versions[topic]
		attrs := wt.attrs
		wt.mu.Unlock()
		if !watching {
			continue
		}
		res := wt.n.routeResult(wire.TopicVersion{Topic: topic, Version: have}, wt.cs.peer.ip, attrs)
		switch res.Status {
		case wire.StatusNotModified:
			continue
		case wire.StatusWarmingUp:
			// Not known yet, perhaps only because brokers have not come
			// back since a restart: say nothing until warm-up ends, when
			// every topic is looked at again (markAll).
			continue
		case wire.StatusNotFound:
			if have == 0 {
				continue // the client already knows there is no route
			}
			res.Status = wire.StatusNotFound
		}
		body, err := wire.Marshal(wt.n.routeEvent(res)) // with freshness: node/info.go
		if err != nil {
			continue
		}
		if wt.w.write(&wire.Frame{Type: wire.TypeRouteEvent, Body: body}) != nil {
			return false
		}
		wt.mu.Lock()
		if _, ok := wt.versions[topic]; ok {
			wt.versions[topic] = res.Version
		}
		wt.mu.Unlock()
	}
	return true
}

// close stops the pusher and drops every subscription of the stream.
func (wt *watcher) close() {
	close(wt.done)
	wt.wg.Wait()
	wt.mu.Lock()
	defer wt.mu.Unlock()
	for t := range wt.versions {
		wt.n.watches.remove(wt, t)
	}
	wt.cs.addWatches(-len(wt.versions), 0)
	wt.n.watches.mu.Lock()
	wt.n.watches.count--
	wt.n.watches.mu.Unlock()
}
