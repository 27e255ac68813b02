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
	"github.com/edgereg/edgereg/wire/client"
)

// Route returns a topic's route and its version. It is served from the
// cache while fresh; otherwise a node is asked, failing over to the next
// one on an error, a timeout or a warming-up answer. A topic no broker
// holds is an error matching wire.ErrNotFound (wire.ErrWarmingUp when every
// node that answered is warming up). The returned route is shared with the
// cache: treat it as read-only.
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
		if e := c.cache[topic]; e != nil && c.freshLocked(e) {
			route, v := e.route, e.version
			c.mu.Unlock()
			c.stats.cacheHits.Add(1)
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
		// caller, whose context still runs, looks again.
		if f.err != nil && (errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded)) {
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
func (c *Client) lookup(ctx context.Context, topic string) (wire.Route, uint64, error) {
	c.mu.Lock()
	var have uint64
	if e := c.cache[topic]; e != nil {
		have = e.version
	}
	c.mu.Unlock()
	rs, err := c.query(ctx, []wire.TopicVersion{{Topic: topic, Version: have}}, &c.stats.queries)
	if err != nil {
		return c.staleOr(topic, fmt.Errorf("route of %s: %w", topic, err))
	}
	res := &rs[0]
	switch res.Status {
	case wire.StatusNotModified:
		c.mu.Lock()
		e := c.cache[topic]
		if e != nil && e.version == res.Version {
			e.checked = time.Now()
			route := e.route
			c.mu.Unlock()
			return route, res.Version, nil
		}
		c.mu.Unlock()
		// The entry went away meanwhile: ask for the whole route.
		rs, err = c.query(ctx, []wire.TopicVersion{{Topic: topic}}, &c.stats.queries)
		if err != nil {
			return c.staleOr(topic, fmt.Errorf("route of %s: %w", topic, err))
		}
		res = &rs[0]
	case wire.StatusWarmingUp:
		return c.staleOr(topic, wire.Errorf(wire.CodeWarmingUp, "topic %s not found yet: every node that answered is warming up", topic))
	}
	route, version, err := client.DecodeResult(res)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil && res.Status == wire.StatusOK:
		c.cache[topic] = &entry{route: route, version: version, checked: time.Now()}
	case errors.Is(err, wire.ErrNotFound):
		delete(c.cache, topic)
	}
	return route, version, err
}

// staleOr serves the cached route of topic, however old, when no node
// answered; without one it returns err.
func (c *Client) staleOr(topic string, err error) (wire.Route, uint64, error) {
	c.mu.Lock()
	e := c.cache[topic]
	c.mu.Unlock()
	if e == nil {
		return wire.Route{}, 0, err
	}
	c.stats.staleServed.Add(1)
	c.log.Warn("no node answered: serving a cached route", "topic", topic, "age", time.Since(e.checked).Round(time.Millisecond).String(), "err", err)
	return e.route, e.version, nil
}

// query asks the candidate nodes in turn until every topic has an answer.
// A topic a node answers "warming up" is asked of the next node; the last
// node's answer stands. It fails only when no node answered at all.
func (c *Client) query(ctx context.Context, tvs []wire.TopicVersion, sent *atomic.Uint64) ([]wire.RouteResult, error) {
	cands, err := c.candidates(ctx)
	if err != nil {
		return nil, err
	}
	results := make([]wire.RouteResult, len(tvs))
	todo := make([]int, len(tvs))
	for i := range todo {
		todo[i] = i
	}
	var errs []error
	answered := false
	for i, n := range cands {
		if len(todo) == 0 {
			break
		}
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		if i > 0 {
			c.stats.failovers.Add(1)
		}
		req := make([]wire.TopicVersion, len(todo))
		for j, idx := range todo {
			req[j] = tvs[idx]
		}
		rs, err := c.ask(ctx, n, req, sent)
		if err != nil {
			errs = append(errs, err)
			c.log.Debug("node did not answer: trying the next", "node", n.addr, "err", err)
			continue
		}
		answered = true
		last := i == len(cands)-1
		var again []int
		for j, idx := range todo {
			results[idx] = rs.Results[j]
			if rs.Results[j].Status == wire.StatusWarmingUp && !last {
				again = append(again, idx)
			}
		}
		if len(again) < len(todo) {
			c.setPreferred(n)
		}
		todo = again
	}
	if !answered {
		return nil, fmt.Errorf("no node answered: %w", errors.Join(errs...))
	}
	return results, nil
}

// ask sends one get-routes request to one node.
func (c *Client) ask(ctx context.Context, n *node, req []wire.TopicVersion, sent *atomic.Uint64) (wire.Routes, error) {
	conn, err := n.get(ctx)
	if err != nil {
		if !errors.Is(err, errNodeGone) && ctx.Err() == nil {
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
		return rs, nil
	case ctx.Err() != nil:
		// The caller gave up: says nothing about the node.
	case errors.As(err, &we):
		if errors.Is(err, wire.ErrUnavailable) || errors.Is(err, wire.ErrOverloaded) {
			n.failed()
		}
	default:
		n.failed()
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
	tvs := make([]wire.TopicVersion, 0, len(c.cache))
	for t, e := range c.cache {
		tvs = append(tvs, wire.TopicVersion{Topic: t, Version: e.version})
	}
	c.mu.Unlock()
	slices.SortFunc(tvs, func(a, b wire.TopicVersion) int { return strings.Compare(a.Topic, b.Topic) })
	var errs []error
	for len(tvs) > 0 {
		n, size := 0, 0
		for n < len(tvs) && n < MaxTopicsPerRequest && size < maxRequestBytes {
			size += len(tvs[n].Topic) + 12 // name, version and CBOR framing
			n++
		}
		batch := tvs[:n]
		tvs = tvs[n:]
		rs, err := c.query(ctx, batch, &c.stats.refreshes)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.applyRefresh(rs)
	}
	if len(errs) > 0 {
		return fmt.Errorf("refresh routes: %w", errors.Join(errs...))
	}
	return nil
}

func (c *Client) applyRefresh(rs []wire.RouteResult) {
	type decoded struct {
		route   wire.Route
		version uint64
	}
	routes := make(map[string]decoded)
	for i := range rs {
		if rs[i].Status != wire.StatusOK {
			continue
		}
		route, v, err := client.DecodeResult(&rs[i])
		if err != nil {
			c.log.Warn("refresh: undecodable route", "topic", rs[i].Topic, "err", err)
			continue
		}
		routes[rs[i].Topic] = decoded{route, v}
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range rs {
		r := &rs[i]
		e := c.cache[r.Topic]
		if e == nil {
			continue // forgotten meanwhile
		}
		switch r.Status {
		case wire.StatusNotModified:
			if e.version == r.Version {
				e.checked = now
				c.stats.notModified.Add(1)
			}
		case wire.StatusOK:
			if d, ok := routes[r.Topic]; ok {
				e.route, e.version, e.checked = d.route, d.version, now
				c.stats.updated.Add(1)
			}
		case wire.StatusNotFound:
			delete(c.cache, r.Topic) // no broker holds it any more
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

// cacheEvent records a route a watch stream pushed.
func (c *Client) cacheEvent(u *Update) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if u.Gone {
		delete(c.cache, u.Topic)
		return
	}
	c.cache[u.Topic] = &entry{route: u.Route, version: u.Version, checked: time.Now()}
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
