package routeclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
)

// errEnded marks a subscription whose refusal was delivered.
var errEnded = errors.New("watch ended")

// Update is the state of a watched topic, pushed by a node.
type Update struct {
	Topic string
	// Route is the topic's route (read-only); empty when Gone.
	Route wire.Route
	// Version is the route's version; 0 when Gone.
	Version uint64
	// Gone reports that no broker holds the topic any more.
	Gone bool
	// Err, when set, ends the watch: every node refused this client for
	// good (it matches ErrRefused; for instance a certificate from another
	// CA). It is the last update; the channel closes after it. Topic is
	// empty.
	Err error
}

// Watch subscribes to route changes of topics and returns the channel that
// delivers them. For a topic whose route the client already knows (from
// the cache) that route is delivered first; then every change a node
// pushes, within one round trip of the change on that node.
//
// All watches of a Client share Fanout long-lived streams, each to another
// node, and every update is the merge of what those nodes pushed (the rule
// of Route), so a node cut off from some brokers cannot hide them. When a
// stream or its connection is lost, or its node leaves the list, the
// client opens a stream to a node no other stream uses (the same or
// another; a node that says it is warming up is used only when no other
// answers) and watches again, naming the version it holds of every topic:
// the node pushes whatever differs, so nothing is missed.
//
// Updates are state, not a log: if the receiver falls behind, the pending
// update of a topic is replaced by a newer one, so the channel always
// catches up to the latest route of every topic. The watch lasts until ctx
// ends or the client closes; the channel is then closed, and topics no
// other watch names are unwatched on the node. Watch returns at once: the
// subscription is made, and remade, in the background. Failures that
// retrying can fix (a node down, a lost stream) are retried with backoff;
// a refusal by every node (ErrRefused) is delivered as an Update with Err
// set, and the channel closes. Config.OnConnState tells every change of a
// node's connection state meanwhile.
//
// A node lets one connection watch a bounded number of topics (10,000 by
// default, its --max-watches-per-conn). Topics past a node's cap are not
// watched on that node (a warning is logged) while the stream goes on for
// the others; they are tried again whenever the set of watched topics
// changes, and their merged state comes from the other nodes watched.
func (c *Client) Watch(ctx context.Context, topics ...string) (<-chan Update, error) {
	if len(topics) == 0 {
		return nil, fmt.Errorf("%w: watch names no topic", ErrInvalidTopic)
	}
	for _, t := range topics {
		if err := validTopic(t); err != nil {
			return nil, err
		}
	}
	topics = slices.Compact(slices.Sorted(slices.Values(topics)))
	s := &subscription{
		hub:     c.watch,
		ctx:     ctx,
		topics:  topics,
		ch:      make(chan Update),
		pending: make(map[string]Update),
		wake:    make(chan struct{}, 1),
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	c.wg.Add(1)
	c.mu.Unlock()
	c.watch.add(s)
	go s.deliver()
	return s.ch, nil
}

// subscription is one Watch call: its topics and its delivery goroutine,
// owned by the Client (Client.wg) and ended by its ctx or Close.
type subscription struct {
	hub    *watchHub
	ctx    context.Context
	topics []string
	ch     chan Update

	mu      sync.Mutex
	pending map[string]Update // latest undelivered state per topic
	order   []string          // topics of pending, oldest first
	err     error             // the refusal that ends the watch
	wake    chan struct{}
}

// fail ends the subscription with err, once what is pending is delivered.
func (s *subscription) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscription) push(u Update) {
	s.mu.Lock()
	if _, ok := s.pending[u.Topic]; !ok {
		s.order = append(s.order, u.Topic)
	}
	s.pending[u.Topic] = u
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscription) next() (Update, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.order) == 0 {
		if s.err != nil {
			u := Update{Err: s.err}
			s.err = errEnded
			return u, true
		}
		return Update{}, false
	}
	t := s.order[0]
	s.order = s.order[1:]
	u := s.pending[t]
	delete(s.pending, t)
	return u, true
}

func (s *subscription) deliver() {
	c := s.hub.c
	defer c.wg.Done()
	defer close(s.ch)
	defer s.hub.remove(s)
	for {
		u, ok := s.next()
		if u.Err == errEnded {
			return
		}
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-s.ctx.Done():
				return
			case <-c.ctx.Done():
				return
			}
		}
		select {
		case s.ch <- u:
		case <-s.ctx.Done():
			return
		case <-c.ctx.Done():
			return
		}
	}
}

// watchHub holds every watched topic of a Client and keeps Fanout watch
// streams, each to another node, subscribed to all of them (a slot per
// stream). Each stream's pushes update that node's view of a topic; the
// views are merged by the rule of PROTOCOL.md 9.1, and subscribers get the
// merged route whenever it changes. Lock order: watchHub.mu before
// Client.mu.
type watchHub struct {
	c     *Client
	slots int
	wakes []chan struct{} // per slot: the topic set changed

	mu     sync.Mutex
	topics map[string]*watchedTopic
	inUse  map[*node]int // node -> the slot whose stream is on it
	// remergeAt is when the next scheduled remerge runs (zero: none).
	remergeAt time.Time
}

type watchedTopic struct {
	version uint64  // the merged version held (0: none), named when watching again
	last    *Update // the latest merged state, for subscriptions that join later
	fresh   []bool  // per slot: added since that slot's stream last subscribed it
	views   []slotView
	subs    map[*subscription]struct{}
}

// slotView is what one slot's node last said about a topic.
type slotView struct {
	known   bool
	gone    bool
	route   wire.Route
	version uint64
	fresh   map[string]wire.GroupFreshness
	at      time.Time
	ready   bool
	// lostAt is set once the slot's stream broke: the view then still
	// vouches for each of its groups, but only until that group's lease
	// would have run out on that node (see forget); after that it says
	// nothing of the group.
	lostAt time.Time
}

// lostDeadline is when a broken stream's view stops vouching for group g:
// its age plus time to deadline as last pushed (its threshold), counted
// from the break, as heartbeats renewed it silently while the stream
// lived. A group without freshness (an older node) ends at the break.
func (v *slotView) lostDeadline(g string) time.Time {
	f, ok := v.fresh[g]
	if !ok || f.DeadlineInMs <= 0 {
		return v.lostAt
	}
	return v.lostAt.Add(time.Duration(f.AgeMs+f.DeadlineInMs) * time.Millisecond)
}

// witness returns the view as it counts at now: a broken stream's route
// keeps only the groups it still vouches for (nothing once none is left).
func (v *slotView) witness(now time.Time) (slotView, bool) {
	if !v.known || v.lostAt.IsZero() {
		return *v, v.known
	}
	w := *v
	w.route = wire.Route{}
	for i, q := range v.route.Queues {
		if i < len(v.route.Brokers) && now.Before(v.lostDeadline(q.BrokerName)) {
			w.route.Queues = append(w.route.Queues, q)
			w.route.Brokers = append(w.route.Brokers, v.route.Brokers[i])
		}
	}
	if len(w.route.Queues) == 0 {
		return slotView{}, false
	}
	if len(w.route.Queues) != len(v.route.Queues) {
		body, err := wire.Marshal(&w.route)
		if err != nil {
			return slotView{}, false
		}
		w.version = wire.RouteVersion(body)
	}
	return w, true
}

// nextLostDeadline is the earliest time after now at which a broken
// stream's view stops vouching for a group; zero when there is none.
func (v *slotView) nextLostDeadline(now time.Time) time.Time {
	var next time.Time
	if !v.known || v.lostAt.IsZero() {
		return next
	}
	for _, q := range v.route.Queues {
		if d := v.lostDeadline(q.BrokerName); d.After(now) && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	return next
}

func newWatchHub(c *Client) *watchHub {
	h := &watchHub{c: c, slots: c.cfg.Fanout, topics: make(map[string]*watchedTopic), inUse: make(map[*node]int)}
	for range h.slots {
		h.wakes = append(h.wakes, make(chan struct{}, 1))
	}
	return h
}

func (h *watchHub) signal() {
	for _, w := range h.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

func (h *watchHub) add(s *subscription) {
	h.mu.Lock()
	for _, t := range s.topics {
		wt := h.topics[t]
		if wt == nil {
			wt = &watchedTopic{fresh: make([]bool, h.slots), views: make([]slotView, h.slots), subs: make(map[*subscription]struct{})}
			for i := range wt.fresh {
				wt.fresh[i] = true
			}
			if e, ok := h.c.cached(t); ok {
				wt.version = e.version
				wt.last = &Update{Topic: t, Route: e.route, Version: e.version}
			}
			h.topics[t] = wt
		}
		wt.subs[s] = struct{}{}
		if wt.last != nil {
			s.push(*wt.last)
		}
	}
	h.mu.Unlock()
	h.signal()
}

func (h *watchHub) remove(s *subscription) {
	var dropped []string
	h.mu.Lock()
	for _, t := range s.topics {
		if wt := h.topics[t]; wt != nil {
			delete(wt.subs, s)
			if len(wt.subs) == 0 {
				delete(h.topics, t)
				dropped = append(dropped, t)
			}
		}
	}
	h.c.unwatched(dropped) // under h.mu: a new watch of them waits for it
	h.mu.Unlock()
	h.signal()
}

func (h *watchHub) watching() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.topics))
	for t := range h.topics {
		out = append(out, t)
	}
	return out
}

// run keeps a watch stream per slot open while any topic is watched,
// until the client closes. It is owned by the Client.
func (h *watchHub) run() {
	var wg sync.WaitGroup
	for slot := range h.slots {
		wg.Go(func() { h.runSlot(slot) })
	}
	wg.Wait()
}

func (h *watchHub) runSlot(slot int) {
	c := h.c
	failures := 0
	for {
		if len(h.watching()) == 0 {
			select {
			case <-c.ctx.Done():
				return
			case <-h.wakes[slot]:
				continue
			}
		}
		st, err := h.connect(slot)
		switch {
		case errors.Is(err, ErrRefused):
			c.log.Error("every node refused this client: ending the watches", "err", err)
			h.refuse(err)
			continue
		case errors.Is(err, errNoSpareNode):
			// Fewer nodes than slots, or the others are taken: look again
			// after a backoff, as after a failure.
			failures = min(failures+1, 8)
		case err == nil:
			ok := h.serve(slot, st)
			h.release(st.node)
			if ok {
				failures = 0
			} else {
				failures++
			}
		case c.ctx.Err() == nil:
			failures++
			c.log.Warn("cannot open a watch stream: retrying", "slot", slot, "failures", failures, "err", err)
		}
		t := time.NewTimer(c.cfg.Backoff.Delay(max(failures-1, 0)))
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// errNoSpareNode: every listed node already carries another slot's stream.
var errNoSpareNode = errors.New("no node without a watch stream")

// stream is one watch stream.
type stream struct {
	node *node
	conn *client.Conn
	pipe *client.Pipe
}

// call sends one request on the stream, bounded by RequestTimeout (see
// stuckGrace).
func (st *stream) call(c *Client, t wire.Type, req, resp any) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RequestTimeout)
	defer cancel()
	return st.pipe.Call(ctx, t, req, resp)
}

// refuse ends every subscription with err.
func (h *watchHub) refuse(err error) {
	h.mu.Lock()
	subs := make(map[*subscription]struct{})
	for _, wt := range h.topics {
		for s := range wt.subs {
			subs[s] = struct{}{}
		}
	}
	h.mu.Unlock()
	for s := range subs {
		s.fail(err)
		h.remove(s) // its topics are not watched again
	}
}

// sameAsOther reports whether another slot's stream is on a node that
// gave n's identity (wire.NodeKey): the list names one node under two names.
func (h *watchHub) sameAsOther(n *node, slot int) bool {
	id := n.identity()
	if id == "" {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for o, s := range h.inUse {
		if o != n && s != slot && o.identity() == id {
			return true
		}
	}
	return false
}

// claim reserves n for slot unless another slot's stream is on it.
func (h *watchHub) claim(n *node, slot int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.inUse[n]; ok && s != slot {
		return false
	}
	h.inUse[n] = slot
	return true
}

func (h *watchHub) release(n *node) {
	h.mu.Lock()
	delete(h.inUse, n)
	h.mu.Unlock()
}

// connect opens a stream for slot to the first candidate node that no
// other slot uses, answers a ping on it and is not warming up; a
// warming-up node is used only when no other answers. The result matches
// ErrRefused only when every listed node refused this client.
func (h *watchHub) connect(slot int) (*stream, error) {
	c := h.c
	cands, err := c.candidates(c.ctx)
	if err != nil {
		return nil, err
	}
	var warming *stream
	var errs []error
	refused, tried := 0, 0
	for _, n := range cands {
		if !h.claim(n, slot) {
			continue
		}
		tried++
		st, warm, err := h.open(n)
		if err == nil && h.sameAsOther(n, slot) {
			// One node under a second name: a second stream to it is no
			// second witness.
			st.pipe.Close()
			h.release(n)
			tried--
			continue
		}
		if err != nil {
			h.release(n)
			if permanent(err) {
				refused++
			}
			errs = append(errs, fmt.Errorf("%s: %w", n.addr, err))
			continue
		}
		if !warm {
			if warming != nil {
				warming.pipe.Close()
				h.release(warming.node)
			}
			return st, nil
		}
		if warming == nil {
			warming = st
		} else {
			st.pipe.Close()
			h.release(n)
		}
	}
	if warming != nil {
		return warming, nil
	}
	if tried == 0 {
		return nil, errNoSpareNode
	}
	if refused == len(cands) {
		return nil, fmt.Errorf("%w: no node opened a watch stream: %w", ErrRefused, errors.Join(errs...))
	}
	return nil, fmt.Errorf("no node opened a watch stream: %w", errors.Join(errs...))
}

func (h *watchHub) open(n *node) (*stream, bool, error) {
	c := h.c
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RequestTimeout)
	defer cancel()
	conn, err := n.get(ctx)
	if err != nil {
		if !errors.Is(err, errNodeGone) && !errors.Is(err, errSharedDial) && c.ctx.Err() == nil {
			n.failed()
		}
		return nil, false, err
	}
	pipe, err := conn.OpenPipe(ctx)
	if err != nil {
		n.failed()
		return nil, false, err
	}
	st := &stream{node: n, conn: conn, pipe: pipe}
	var pong wire.Pong
	if err := st.call(c, wire.TypePing, nil, &pong); err != nil {
		pipe.Close()
		n.failed()
		n.report(err)
		return nil, false, err
	}
	n.identified(wire.NodeKey(pong.NodeID, pong.StartedMs))
	return st, pong.WarmingUp, nil
}

// serve subscribes every watched topic on st and keeps the subscription in
// step with the topic set, pinging every RefreshInterval, until the stream
// ends, its node leaves the list, no topic is left, or the client closes.
// It reports whether the subscription was made.
func (h *watchHub) serve(slot int, st *stream) bool {
	c := h.c
	c.stats.watchStreams.Add(1)
	readerDone := make(chan struct{})
	go func() { // owned by serve, which waits for it
		defer close(readerDone)
		for f := range st.pipe.Events() {
			h.apply(slot, f)
		}
	}()
	defer func() {
		st.pipe.Close()
		<-readerDone
		h.forget(slot)
	}()
	sent := make(map[string]bool)
	if err := h.sync(slot, st, sent); err != nil {
		if c.ctx.Err() == nil {
			c.log.Warn("watch refused: retrying", "node", st.node.addr, "err", err)
		}
		return false
	}
	c.log.Debug("watching routes", "node", st.node.addr, "slot", slot, "topics", len(sent))
	ping := time.NewTicker(c.cfg.RefreshInterval)
	defer ping.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return true
		case <-st.node.ctx.Done():
			return true
		case <-st.pipe.Done():
			if c.ctx.Err() == nil {
				c.log.Info("watch stream ended: resuming", "node", st.node.addr, "err", st.pipe.Err())
				st.node.failed()
				st.node.report(st.pipe.Err())
			}
			return true
		case <-h.wakes[slot]:
			if err := h.sync(slot, st, sent); err != nil {
				if c.ctx.Err() == nil {
					c.log.Warn("watch update failed: resuming on a new stream", "node", st.node.addr, "err", err)
				}
				return true
			}
			if len(h.watching()) == 0 {
				return true // nothing left to watch: close the stream
			}
		case <-ping.C:
			if err := st.call(c, wire.TypePing, nil, nil); err != nil {
				if c.ctx.Err() == nil {
					c.log.Info("watch stream silent: resuming", "node", st.node.addr, "err", err)
					st.node.failed()
					st.node.report(err)
				}
				return true
			}
			c.touch(h.watching()) // a live stream would have pushed any change
		}
	}
}

// sync sends a watch for every topic not yet subscribed on the slot's
// stream (naming the merged version held) and an unwatch for every topic
// no longer watched. sent is the stream's subscribed set. A topic it
// subscribes starts with the view "the node holds the route named": the
// node pushes only what differs.
func (h *watchHub) sync(slot int, st *stream, sent map[string]bool) error {
	c := h.c
	h.mu.Lock()
	var add []wire.TopicVersion
	for t, wt := range h.topics {
		if !sent[t] || wt.fresh[slot] {
			add = append(add, wire.TopicVersion{Topic: t, Version: wt.version})
			wt.fresh[slot] = false
			wt.views[slot] = slotView{}
			if wt.last != nil && !wt.last.Gone {
				wt.views[slot] = slotView{known: true, route: wt.last.Route, version: wt.last.Version, ready: true}
			}
		}
	}
	var remove []string
	for t := range sent {
		if _, ok := h.topics[t]; !ok {
			remove = append(remove, t)
		}
	}
	h.mu.Unlock()
	limit := MaxTopicsPerRequest
	for len(add) > 0 {
		n := min(limit, batchLen(len(add), func(i int) string { return add[i].Topic }))
		err := st.call(c, wire.TypeWatch, &wire.Watch{Topics: add[:n], Client: c.cfg.Attrs}, nil)
		switch {
		case err == nil:
			for _, tv := range add[:n] {
				sent[tv.Topic] = true
			}
			add = add[n:]
		case errors.Is(err, wire.ErrOverloaded) && n > 1:
			// Over the node's cap of watched topics per connection (the
			// request changed nothing): smaller requests find how many fit.
			limit = n / 2
		case errors.Is(err, wire.ErrOverloaded):
			// The connection is at the cap: the rest are not watched on
			// this node. The stream stays, for the topics it watches; the
			// rest are tried again at the next change of the topic set.
			c.log.Warn("node watches no more topics on this connection: the rest are not watched there",
				"node", st.node.addr, "watched", len(sent), "not watched", len(add), "err", err)
			h.unwatched(slot, add)
			add = nil
		default:
			h.refresh(slot, add) // subscribe them on the next stream
			return fmt.Errorf("watch on %s: %w", st.node.addr, err)
		}
	}
	for len(remove) > 0 {
		n := batchLen(len(remove), func(i int) string { return remove[i] })
		if err := st.call(c, wire.TypeUnwatch, &wire.Unwatch{Topics: remove[:n]}, nil); err != nil {
			return fmt.Errorf("unwatch on %s: %w", st.node.addr, err)
		}
		for _, t := range remove[:n] {
			delete(sent, t)
		}
		remove = remove[n:]
	}
	return nil
}

// forget ends what slot's node said when its stream breaks. Its route
// stays a witness for each group only while that group could still hold a
// lease on that node (slotView.lostDeadline): a group hidden from the
// other node by a partition is not dropped at once, and a group that
// really died is dropped within one threshold even if the slot never
// reconnects; a re-merge runs at each such deadline, so subscribers get
// the final route without waiting for a push. Its not-found answers end
// now. The next stream of the slot starts afresh (sync).
func (h *watchHub) forget(slot int) {
	now := time.Now()
	h.mu.Lock()
	for _, wt := range h.topics {
		v := &wt.views[slot]
		switch {
		case v.gone:
			*v = slotView{}
		case v.known && v.lostAt.IsZero():
			v.lostAt = now
		}
	}
	h.mu.Unlock()
	h.remerge()
}

// remerge merges every topic's views again, delivers what changed, and
// schedules itself for the next time a broken stream's view runs out. It
// does nothing once the client closed.
func (h *watchHub) remerge() {
	c := h.c
	if c.ctx.Err() != nil {
		return
	}
	now := time.Now()
	var out []Update
	var seqs []uint64
	var next time.Time
	h.mu.Lock()
	for t, wt := range h.topics {
		if u, seq, ok := h.deliverLocked(t, wt); ok {
			out = append(out, u)
			seqs = append(seqs, seq)
		}
		for i := range wt.views {
			if d := wt.views[i].nextLostDeadline(now); !d.IsZero() && (next.IsZero() || d.Before(next)) {
				next = d
			}
		}
	}
	if !next.IsZero() && (h.remergeAt.IsZero() || next.Before(h.remergeAt) || !h.remergeAt.After(now)) {
		h.remergeAt = next
		time.AfterFunc(time.Until(next)+time.Millisecond, h.remerge)
	}
	h.mu.Unlock()
	for i := range out {
		c.cacheEvent(&out[i], seqs[i])
	}
}

// deliverLocked merges a topic's views and pushes the merged state to its
// subscriptions when it changed; with h.mu held. It numbers the state
// (Client.pushSeq); the caller records it in the route cache, with that
// number, after unlocking.
func (h *watchHub) deliverLocked(topic string, wt *watchedTopic) (Update, uint64, bool) {
	u, ok := wt.merged(topic, time.Now())
	if !ok || (wt.last != nil && wt.last.Gone == u.Gone && wt.last.Version == u.Version) {
		return Update{}, 0, false // nothing new
	}
	wt.version, wt.last = u.Version, &u
	for s := range wt.subs {
		s.push(u)
	}
	return u, h.c.pushSeq.Add(1), true
}

// unwatched records that slot's node refused to watch topics (its cap):
// its view of them, set by sync as "holds the route named", says nothing
// after all, or it would vouch for groups that node never confirmed.
func (h *watchHub) unwatched(slot int, tvs []wire.TopicVersion) {
	h.mu.Lock()
	for _, tv := range tvs {
		if wt := h.topics[tv.Topic]; wt != nil {
			wt.views[slot] = slotView{}
		}
	}
	h.mu.Unlock()
	h.remerge()
}

// refresh marks topics to be subscribed again on slot's next stream.
func (h *watchHub) refresh(slot int, tvs []wire.TopicVersion) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, tv := range tvs {
		if wt := h.topics[tv.Topic]; wt != nil {
			wt.fresh[slot] = true
		}
	}
}

// apply records one pushed route event as its slot's view of the topic,
// merges the views, and delivers the merged state to the topic's
// subscriptions and the route cache when it changed.
func (h *watchHub) apply(slot int, f *wire.Frame) {
	c := h.c
	if f.Type != wire.TypeRouteEvent {
		return
	}
	var ev wire.RouteEvent
	if err := f.DecodeBody(&ev); err != nil {
		c.log.Warn("undecodable route event", "err", err)
		return
	}
	res := &ev.Result
	v := slotView{known: true, fresh: freshnessOf(ev.Groups), at: time.Now(), ready: !ev.Node.WarmingUp}
	switch res.Status {
	case wire.StatusOK:
		route, version, err := decodeRoute(res)
		if err != nil {
			c.log.Warn("undecodable route event", "topic", res.Topic, "err", err)
			return
		}
		v.route, v.version = route, version
	case wire.StatusNotFound:
		v.gone = true
	default:
		return
	}
	c.stats.events.Add(1)
	h.mu.Lock()
	wt := h.topics[res.Topic]
	if wt == nil {
		h.mu.Unlock()
		return // no longer watched
	}
	wt.views[slot] = v
	u, seq, ok := h.deliverLocked(res.Topic, wt)
	h.mu.Unlock()
	if c.onPushed != nil {
		c.onPushed(res.Topic)
	}
	if ok {
		c.cacheEvent(&u, seq)
	}
}

// merged is the topic's state at now by the merge rule over the slots'
// views.
func (wt *watchedTopic) merged(topic string, now time.Time) (Update, bool) {
	var a topicAnswers
	for i := range wt.views {
		v, ok := wt.views[i].witness(now)
		if !ok {
			continue
		}
		switch {
		case !v.known:
		case v.gone && v.ready:
			a.readyNotFound++
		case v.gone:
			a.warming++
		default:
			a.views = append(a.views, view{route: &v.route, version: v.version, fresh: v.fresh, at: v.at, ready: v.ready, order: i})
		}
	}
	if len(a.views) == 0 && a.readyNotFound == 0 {
		return Update{}, false
	}
	m := a.merge(topic, 0)
	if m.status == wire.StatusNotFound {
		return Update{Topic: topic, Gone: true}, true
	}
	if m.status != wire.StatusOK {
		return Update{}, false
	}
	return Update{Topic: topic, Route: m.route, Version: m.version}, true
}

// touch marks cached routes as confirmed now.
func (c *Client) touch(topics []string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range topics {
		if e := c.cache[t]; e != nil {
			e.checked = now
		}
	}
}
