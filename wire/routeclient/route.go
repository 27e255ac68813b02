package routeclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// Route returns a topic's route and its version. It is served from the
// cache while fresh; otherwise Fanout nodes are asked at once and their
// answers merged (see the package documentation), failing over to the
// next node on an error, a timeout or a warming-up answer. A topic no
// broker holds is an error matching wire.ErrNotFound, returned only when
// every ready node that answered says so (wire.ErrWarmingUp when every node
// that answered is warming up); ErrRefused when every node refused this
// client's credentials. The returned route is shared with the cache: treat
// it as read-only.
func (c *Client) Route(ctx context.Context, topic string) (wire.Route, uint64, error) {
	if err := validTopic(topic); err != nil {
		return wire.Route{}, 0, err
	}
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return wire.Route{}, 0, ErrClosed
		}
		if e := c.cache[topic]; e != nil && (c.freshLocked(e) || time.Now().Before(e.quietUntil)) {
			route, v, stale := e.route, e.version, !c.freshLocked(e)
			c.mu.Unlock()
			if stale {
				c.stats.staleServed.Add(1)
			} else {
				c.stats.cacheHits.Add(1)
			}
			return route, v, nil
		}
		f, leader := c.inflight[topic], false
		if f == nil {
			f, leader = &flight{done: make(chan struct{})}, true
			c.inflight[topic] = f
		}
		c.mu.Unlock()
		if leader {
			f.route, f.version, f.err = c.lookup(ctx, topic)
			f.cut = f.err != nil && ctx.Err() != nil
			c.mu.Lock()
			delete(c.inflight, topic)
			c.mu.Unlock()
			close(f.done)
			return f.route, f.version, f.err
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return wire.Route{}, 0, fmt.Errorf("route of %s: %w", topic, ctx.Err())
		}
		// The leader's own deadline may have cut its lookup short: this
		// caller, whose context still runs, looks again. Not on any error
		// that wraps a deadline: a dial or request that timed out on a
		// dead node does too, and every waiting caller would then ask the
		// dead node again in turn, one timeout after another.
		if f.cut {
			continue
		}
		return f.route, f.version, f.err
	}
}

// freshLocked reports whether a cached route may be served without asking.
func (c *Client) freshLocked(e *entry) bool {
	return time.Since(e.checked) < 2*c.cfg.RefreshInterval
}

// lookup asks the nodes for one topic, naming the cached version if any.
// Its answer is not cached when the cache learned of the topic from a
// read sent later or a push made after it was sent (overtakenLocked):
// the cached state is then returned instead.
func (c *Client) lookup(ctx context.Context, topic string) (wire.Route, uint64, error) {
	c.mu.Lock()
	req := heldRoute{tv: wire.TopicVersion{Topic: topic}}
	if e := c.cache[topic]; e != nil {
		req.tv.Version, req.route = e.version, e.route
	}
	at := c.stampLocked()
	c.mu.Unlock()
	defer c.readDone()
	ms, err := c.query(ctx, []heldRoute{req}, at, &c.stats.queries)
	if c.onAnswer != nil {
		c.onAnswer(topic)
	}
	if err != nil {
		return c.staleOr(topic, fmt.Errorf("route of %s: %w", topic, err), ctx.Err() == nil)
	}
	m := &ms[0]
	switch m.status {
	case wire.StatusOK, wire.StatusNotModified, wire.StatusNotFound:
		c.mu.Lock()
		if c.overtakenLocked(topic, at) {
			e := c.cache[topic]
			if e == nil {
				c.mu.Unlock()
				return wire.Route{}, 0, wire.Errorf(wire.CodeNotFound, "topic %s not found: a watch push says it is gone", topic)
			}
			route, v := e.route, e.version // a refresh may change e once unlocked
			c.mu.Unlock()
			return route, v, nil
		}
		if m.status == wire.StatusNotFound {
			c.dropLocked(topic, at)
			c.mu.Unlock()
			return wire.Route{}, 0, wire.Errorf(wire.CodeNotFound, "topic %s not found: every ready node that answered (%d) says so", topic, m.answers)
		}
		c.putLocked(topic, m.route, m.version, time.Now(), at)
		c.mu.Unlock()
		return m.route, m.version, nil
	}
	return c.staleOr(topic, wire.Errorf(wire.CodeWarmingUp, "topic %s not found yet: every node that answered is warming up", topic), true)
}

// pushedLocked is the sequence number of the last watch push recorded for
// topic (0 for none); with c.mu held.
func (c *Client) pushedLocked(topic string) uint64 {
	if e := c.cache[topic]; e != nil {
		return e.pushed
	}
	return c.goneAt[topic]
}

// asOf stamps a read when it is sent: the last push number then, and the
// read's own number (Client.pushSeq, Client.pollSeq).
type asOf struct{ push, poll uint64 }

// stampLocked stamps a read about to be sent; with c.mu held. The caller
// calls readDone once it recorded the answers.
func (c *Client) stampLocked() asOf {
	c.reading++
	return asOf{push: c.pushSeq.Load(), poll: c.pollSeq.Add(1)}
}

// readDone ends a stamped read; with no read left in flight, no answer can
// be older than a drop, and dropped is emptied.
func (c *Client) readDone() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reading--; c.reading == 0 {
		clear(c.dropped)
	}
}

// overtakenLocked reports whether the cache holds newer news of topic
// than the answer to a read stamped at: a push made after the read was
// sent, or the answer to a read sent after it; with c.mu held.
func (c *Client) overtakenLocked(topic string, at asOf) bool {
	if c.pushedLocked(topic) > at.push {
		return true
	}
	if e := c.cache[topic]; e != nil {
		return e.polled > at.poll
	}
	return c.dropped[topic] > at.poll
}

// putLocked caches the answer to a read stamped at; with c.mu held.
func (c *Client) putLocked(topic string, route wire.Route, version uint64, now time.Time, at asOf) {
	c.cache[topic] = &entry{route: route, version: version, checked: now, pushed: c.pushedLocked(topic), polled: at.poll}
	delete(c.goneAt, topic)
	delete(c.dropped, topic)
}

// dropLocked forgets a topic's route on the answer of a read stamped at,
// keeping the number of the last push recorded for it and the read's
// stamp (overtakenLocked); with c.mu held.
func (c *Client) dropLocked(topic string, at asOf) {
	if p := c.pushedLocked(topic); p != 0 {
		c.goneAt[topic] = p
	}
	delete(c.cache, topic)
	c.dropped[topic] = at.poll
}

// staleOr serves the cached route of topic, however old, when no node
// answered; without one it returns err. When the nodes failed (quiet; not
// when the caller's context ended, which says nothing of them), reads
// serve it without asking for a refresh interval.
func (c *Client) staleOr(topic string, err error, quiet bool) (wire.Route, uint64, error) {
	c.mu.Lock()
	e := c.cache[topic]
	if e == nil {
		c.mu.Unlock()
		return wire.Route{}, 0, err
	}
	if quiet {
		e.quietUntil = time.Now().Add(c.cfg.RefreshInterval)
	}
	route, v, checked := e.route, e.version, e.checked // a refresh may change e once unlocked
	c.mu.Unlock()
	c.stats.staleServed.Add(1)
	c.log.Warn("no node answered: serving a cached route", "topic", topic, "age", time.Since(checked).Round(time.Millisecond).String(), "err", err)
	return route, v, nil
}

// heldRoute is one topic to ask about: the version named and the route of
// that version, which a node answering not-modified confirms.
type heldRoute struct {
	tv    wire.TopicVersion
	route wire.Route
}

// reply is one node's answer to a query, for the topics idx of the query.
type reply struct {
	node  *node
	order int
	idx   []int
	rs    wire.Routes
	err   error
	at    time.Time // when it arrived
}

// query asks Fanout nodes at once and merges their answers per topic
// (merge.go). A node that fails is replaced by the next candidate; a topic
// that only warming-up nodes answered is asked of the next candidate. It
// returns once every asked node answered, or MergeWait after the first
// answer when every topic has a route from a ready node by then (a topic
// that has only not-found answers, or only a warming node's route, waits
// for the other nodes asked: not-found is final only when every ready
// node answering says so, and a warming node's route may lack groups). It fails only when no
// node answered.
// at stamps the read (stampLocked): answers that arrive late are not
// cached over newer news.
func (c *Client) query(ctx context.Context, held []heldRoute, at asOf, sent *atomic.Uint64) ([]merged, error) {
	cands, err := c.candidates(ctx)
	if err != nil {
		return nil, err
	}
	// The asks run under the client's context, cancelled with the
	// caller's unless the query returns early on MergeWait: the answers
	// still on their way are then merged into the cache when they arrive
	// (absorbLate). Each ask is bounded by RequestTimeout.
	qctx, cancel := context.WithCancel(c.ctx)
	stopFollowing := context.AfterFunc(ctx, cancel)
	detached := false
	defer func() {
		if !detached {
			stopFollowing()
			cancel() // abandons the asks still in flight; they end promptly
		}
	}()
	replies := make(chan reply, len(cands))
	next, inflight := 0, 0
	launch := func(idx []int) {
		n, order := cands[next], next
		next++
		inflight++
		if order > 0 && order >= c.cfg.Fanout {
			c.stats.failovers.Add(1)
		}
		req := make([]wire.TopicVersion, len(idx))
		for j, i := range idx {
			req[j] = held[i].tv
		}
		go func() {
			rs, err := c.ask(qctx, n, req, sent)
			replies <- reply{node: n, order: order, idx: idx, rs: rs, err: err, at: time.Now()}
		}()
	}
	all := make([]int, len(held))
	for i := range all {
		all[i] = i
	}
	for next < firstAsks(cands, c.cfg.Fanout, time.Now()) {
		launch(all)
	}
	start := time.Now()
	var got []reply
	var errs []error
	var grace <-chan time.Time
	var graceT *time.Timer
	var graceFor time.Duration
wait:
	for inflight > 0 {
		select {
		case r := <-replies:
			inflight--
			if r.err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", r.node.addr, r.err))
				c.log.Debug("node did not answer: trying the next", "node", r.node.addr, "err", r.err)
				if next < len(cands) && ctx.Err() == nil {
					launch(r.idx)
				}
				break
			}
			if id := wire.NodeKey(r.rs.Node.NodeID, r.rs.Node.StartedMs); id != "" && slices.ContainsFunc(got, func(g reply) bool {
				return wire.NodeKey(g.rs.Node.NodeID, g.rs.Node.StartedMs) == id
			}) {
				// One node under a second name: its answer again is no
				// second witness. Ask the next node instead, and give it
				// the merge wait from now.
				c.log.Debug("node answered under another name too: asking the next", "node", r.node.addr, "node_id", id)
				if next < len(cands) && ctx.Err() == nil {
					launch(r.idx)
					if grace != nil {
						graceT.Reset(graceFor)
					}
				}
				break
			}
			got = append(got, r)
			if graceT == nil {
				graceFor = c.cfg.MergeWait
				if graceFor <= 0 {
					graceFor = max(time.Since(start), MinMergeWait)
				}
				graceT = time.NewTimer(graceFor)
				defer graceT.Stop()
				grace = graceT.C
			}
		case <-grace:
			grace = nil
			if allRouted(held, got) {
				break wait
			}
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
			break wait
		}
		if inflight == 0 && next < len(cands) && ctx.Err() == nil {
			if need := unsettled(held, got); len(need) > 0 {
				launch(need)
			}
		}
	}
	if len(got) == 0 {
		return nil, noAnswer(errs)
	}
	c.prefer(got)
	ms := mergeReplies(held, got)
	if inflight > 0 && ctx.Err() == nil && stopFollowing() {
		detached = c.absorbLate(held, at, got, ms, replies, inflight, cancel)
	}
	return ms, nil
}

// firstAsks orders cands for a query and says how many it asks at once:
// fanout, but never a node that cannot be reached (its last dial failed
// and its backoff runs) while a reachable one is asked instead; such nodes
// go last, and are asked only as a failover (an asked node failed, or only
// they can settle a topic) or when no node is reachable. A node whose
// requests failed on a live connection is still asked: that costs no dial,
// and a transient failure must not leave the read to one node's view (a
// partitioned node's routes lack groups). Before, with two nodes listed
// and one dead, every read and refresh dialled the dead one (once per
// request timeout, for as long as it stayed dead: 15 dials a minute per
// client in node/simtest TestDeadNodeIsNotHammered), whatever its backoff
// said.
func firstAsks(cands []*node, fanout int, now time.Time) int {
	var down []*node
	up := cands[:0]
	for _, n := range cands {
		if n.unreachable(now) {
			down = append(down, n)
		} else {
			up = append(up, n)
		}
	}
	reachable := len(up)
	copy(cands[reachable:], down)
	if reachable == 0 {
		return min(fanout, len(cands))
	}
	return min(fanout, reachable)
}

// absorbLate waits, in the background, for the answers of a query that
// returned on MergeWait, merges them with those it returned, and updates
// the cached routes it returned if the merge changed them. It reports
// whether it took over cancel (false once the client is closing). Newer
// news than the read stamped at (overtakenLocked) stays.
func (c *Client) absorbLate(held []heldRoute, at asOf, got []reply, first []merged, replies <-chan reply, inflight int, cancel context.CancelFunc) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.wg.Add(1)
	c.reading++ // the read goes on until its late answers are merged
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		defer c.readDone()
		defer cancel()
		all := slices.Clone(got)
		for ; inflight > 0; inflight-- {
			if r := <-replies; r.err == nil {
				all = append(all, r)
			}
		}
		if len(all) == len(got) {
			return
		}
		late := mergeReplies(held, all)
		now := time.Now()
		c.mu.Lock()
		defer c.mu.Unlock()
		for i := range late {
			l := &late[i]
			if (l.status != wire.StatusOK && l.status != wire.StatusNotModified) || l.version == first[i].version {
				continue
			}
			if e := c.cache[l.topic]; e != nil && e.version == first[i].version && !c.overtakenLocked(l.topic, at) {
				e.route, e.version, e.checked = l.route, l.version, now
				c.stats.lateMerged.Add(1)
			}
		}
	}()
	return true
}

// noAnswer is the error of a query no node answered; it matches ErrRefused
// when every node refused this client for good.
func noAnswer(errs []error) error {
	err := fmt.Errorf("no node answered: %w", errors.Join(errs...))
	refused := len(errs) > 0
	for _, e := range errs {
		refused = refused && permanent(e)
	}
	if refused {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return err
}

// prefer makes the first node that answered ready the one asked first
// next time.
func (c *Client) prefer(got []reply) {
	best := -1
	for i, r := range got {
		if !r.rs.Node.WarmingUp && (best < 0 || r.order < got[best].order) {
			best = i
		}
	}
	if best >= 0 {
		c.setPreferred(got[best].node)
	}
}

// allRouted reports whether, for every topic, some ready node's answer
// carries a route. A warming node's route does not count: it lacks the
// brokers that have not re-registered with it yet, and what it lacks
// proves nothing (PROTOCOL.md 9), so a read does not stop at it.
func allRouted(held []heldRoute, got []reply) bool {
	routed := make([]bool, len(held))
	for _, r := range got {
		if r.rs.Node.WarmingUp {
			continue
		}
		for j, i := range r.idx {
			if s := r.rs.Results[j].Status; r.rs.Results[j].Topic == held[i].tv.Topic && (s == wire.StatusOK || s == wire.StatusNotModified) {
				routed[i] = true
			}
		}
	}
	return !slices.Contains(routed, false)
}

// unsettled returns the topics no ready node has answered.
func unsettled(held []heldRoute, got []reply) []int {
	settled := make([]bool, len(held))
	for _, r := range got {
		if r.rs.Node.WarmingUp {
			continue
		}
		for j, i := range r.idx {
			if r.rs.Results[j].Status != wire.StatusWarmingUp && r.rs.Results[j].Topic == held[i].tv.Topic {
				settled[i] = true
			}
		}
	}
	var out []int
	for i, ok := range settled {
		if !ok {
			out = append(out, i)
		}
	}
	return out
}

// mergeReplies merges the answers per topic.
func mergeReplies(held []heldRoute, got []reply) []merged {
	answers := make([]topicAnswers, len(held))
	for _, r := range got {
		fresh := freshnessOf(r.rs.Groups)
		ready := !r.rs.Node.WarmingUp
		for j, i := range r.idx {
			res := &r.rs.Results[j]
			if res.Topic != held[i].tv.Topic {
				continue // garbage: an answer for another topic says nothing of this one
			}
			a := &answers[i]
			switch res.Status {
			case wire.StatusOK:
				route, v, err := decodeRoute(res)
				if err != nil {
					continue // an undecodable route says nothing
				}
				a.views = append(a.views, view{route: &route, version: v, fresh: fresh, at: r.at, ready: ready, order: r.order})
			case wire.StatusNotModified:
				if res.Version == held[i].tv.Version && res.Version != 0 {
					a.views = append(a.views, view{route: &held[i].route, version: res.Version, fresh: fresh, at: r.at, ready: ready, order: r.order})
				}
			case wire.StatusNotFound:
				if ready {
					a.readyNotFound++
				} else {
					a.warming++
				}
			case wire.StatusWarmingUp:
				a.warming++
			}
		}
	}
	out := make([]merged, len(held))
	for i := range answers {
		slices.SortFunc(answers[i].views, func(a, b view) int { return a.order - b.order })
		out[i] = answers[i].merge(held[i].tv.Topic, held[i].tv.Version)
	}
	return out
}

// ask sends one get-routes request to one node.
func (c *Client) ask(ctx context.Context, n *node, req []wire.TopicVersion, sent *atomic.Uint64) (wire.Routes, error) {
	conn, err := n.get(ctx)
	if err != nil {
		if !errors.Is(err, errNodeGone) && !errors.Is(err, errSharedDial) && ctx.Err() == nil {
			n.failed()
		}
		return wire.Routes{}, err
	}
	sent.Add(1)
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	rs, err := conn.GetRoutes(rctx, &wire.GetRoutes{Topics: req, Client: c.cfg.Attrs})
	cancel()
	var we *wire.Error
	switch {
	case err == nil:
		n.succeeded()
		n.identified(wire.NodeKey(rs.Node.NodeID, rs.Node.StartedMs))
		n.report(nil)
		return rs, nil
	case ctx.Err() != nil:
		// The caller gave up: says nothing about the node.
	case permanent(err):
		n.report(err)
		return wire.Routes{}, fmt.Errorf("%w: %w", ErrRefused, err)
	case errors.As(err, &we):
		if errors.Is(err, wire.ErrUnavailable) || errors.Is(err, wire.ErrOverloaded) {
			n.failed()
			n.report(err)
		}
	default:
		n.failed()
		n.report(err)
	}
	return wire.Routes{}, err
}

// Refresh re-validates every cached route now, naming the version held:
// unchanged routes come back "not modified" and cost next to nothing. The
// topics go in one request (split only past MaxTopicsPerRequest topics or
// the request size cap). The client also does this every RefreshInterval.
func (c *Client) Refresh(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	held := make([]heldRoute, 0, len(c.cache))
	for t, e := range c.cache {
		held = append(held, heldRoute{tv: wire.TopicVersion{Topic: t, Version: e.version}, route: e.route})
	}
	at := c.stampLocked()
	c.mu.Unlock()
	defer c.readDone()
	slices.SortFunc(held, func(a, b heldRoute) int { return strings.Compare(a.tv.Topic, b.tv.Topic) })
	var errs []error
	for len(held) > 0 {
		n := batchLen(len(held), func(i int) string { return held[i].tv.Topic })
		batch := held[:n]
		held = held[n:]
		ms, err := c.query(ctx, batch, at, &c.stats.refreshes)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.applyRefresh(batch, at, ms)
	}
	if len(errs) > 0 {
		return fmt.Errorf("refresh routes: %w", errors.Join(errs...))
	}
	return nil
}

// batchLen is how many of the next n topics (name(i) is the i-th) one
// request names: at most MaxTopicsPerRequest, and no more than keep the
// request under the node's 1 MiB request cap (maxRequestBytes).
func batchLen(n int, name func(int) string) int {
	k, size := 0, 0
	for k < n && k < MaxTopicsPerRequest && size < maxRequestBytes {
		size += len(name(k)) + 12 // name, version and CBOR framing
		k++
	}
	return k
}

// applyRefresh records a refresh's merged answers in the cache. An entry
// that changed meanwhile, or holds newer news (overtakenLocked: it can
// have the version the refresh named again, A, B, A), is left alone.
func (c *Client) applyRefresh(batch []heldRoute, at asOf, ms []merged) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range ms {
		m := &ms[i]
		e := c.cache[m.topic]
		if e == nil || e.version != batch[i].tv.Version || c.overtakenLocked(m.topic, at) {
			continue // forgotten or replaced meanwhile
		}
		switch m.status {
		case wire.StatusNotModified:
			e.checked, e.polled = now, at.poll
			c.stats.notModified.Add(1)
		case wire.StatusOK:
			e.route, e.version, e.checked, e.polled = m.route, m.version, now, at.poll
			c.stats.updated.Add(1)
		case wire.StatusNotFound:
			c.dropLocked(m.topic, at) // no ready node holds it any more
		}
	}
}

// refreshLoop refreshes every RefreshInterval until the client closes.
func (c *Client) refreshLoop() {
	t := time.NewTicker(c.cfg.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RefreshInterval)
		if err := c.Refresh(ctx); err != nil && c.ctx.Err() == nil {
			c.log.Warn("route refresh failed: keeping the cached routes", "err", err)
		}
		cancel()
	}
}

// cacheEvent records a merged state a watch delivered, numbered seq
// (Client.pushSeq). The hub's goroutines record their states after
// unlocking, so they can arrive out of order: a state numbered before the
// one recorded is older and is dropped.
func (c *Client) cacheEvent(u *Update, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pushedLocked(u.Topic) >= seq {
		return
	}
	if u.Gone {
		delete(c.cache, u.Topic)
		c.goneAt[u.Topic] = seq
		return
	}
	polled := c.dropped[u.Topic] // kept: an answer to a read sent before that one is still older
	if e := c.cache[u.Topic]; e != nil {
		polled = e.polled
	}
	c.cache[u.Topic] = &entry{route: u.Route, version: u.Version, checked: time.Now(), pushed: seq, polled: polled}
	delete(c.goneAt, u.Topic)
}

// unwatched forgets what pushes said of topics no watch names any more:
// no push follows to correct a read, so reads are cached as they come
// (and goneAt keeps nothing for them).
func (c *Client) unwatched(topics []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range topics {
		delete(c.goneAt, t)
		if e := c.cache[t]; e != nil {
			e.pushed = 0
		}
	}
}

// cached returns the cached route of topic, if any.
func (c *Client) cached(topic string) (*entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.cache[topic]
	if !ok {
		return nil, false
	}
	cp := *e
	return &cp, true
}

// Forget drops the cached routes of topics no watch names, so they are no
// longer refreshed: a caller that caches routes of its own (an edge
// gateway) forgets those it stops caching, and the client's cache stays
// bounded by the caller's. A watched topic keeps its route (the watch
// keeps it current); a later Route of a forgotten topic asks the nodes.
func (c *Client) Forget(topics ...string) {
	h := c.watch
	h.mu.Lock() // watchHub.mu before Client.mu
	defer h.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range topics {
		if _, watched := h.topics[t]; !watched {
			delete(c.cache, t)
		}
	}
}
