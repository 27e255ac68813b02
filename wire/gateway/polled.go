package gateway

import (
	"context"
	"sync"
	"time"
)

// polled caches answers the protocol has no watch or version for (cluster
// info, topic lists, member groups), one per key. An answer is served from
// the cache; one older than the poll interval is served too, while one
// background read (at most one per key at a time) fetches a new one. So a
// 5.x broker's cluster-info request every 5 s costs the WAN one read per
// interval at most, and none while the WAN is cut: the last answer stands.
// Only the first request for a key waits for the nodes.
type polled[T any] struct {
	g       *Gateway
	fetch   func(ctx context.Context, key string) (T, error)
	maxKeys int

	mu      sync.Mutex
	entries map[string]*polledEntry[T]
}

type polledEntry[T any] struct {
	ready   chan struct{} // closed when the first fetch ends
	val     T
	err     error // of the first fetch, while there is no value
	ok      bool  // val holds an answer
	fetched time.Time
	asked   time.Time
	busy    bool // a fetch is running
}

func newPolled[T any](g *Gateway, maxKeys int, fetch func(context.Context, string) (T, error)) *polled[T] {
	return &polled[T]{g: g, fetch: fetch, maxKeys: maxKeys, entries: make(map[string]*polledEntry[T])}
}

// get returns the cached answer for key, reporting whether it came from the
// cache, or waits for the first fetch (bounded by ctx).
func (p *polled[T]) get(ctx context.Context, key string) (T, bool, error) {
	now := time.Now()
	p.mu.Lock()
	e := p.entries[key]
	if e == nil {
		if len(p.entries) >= p.maxKeys {
			p.mu.Unlock()
			v, err := p.fetch(ctx, key) // too many keys asked: not cached
			return v, false, err
		}
		e = &polledEntry[T]{ready: make(chan struct{})}
		p.entries[key] = e
		p.startLocked(key, e)
	}
	e.asked = now
	if e.ok {
		if now.Sub(e.fetched) >= p.g.cfg.PollInterval && !e.busy {
			p.startLocked(key, e)
		}
		v := e.val
		p.mu.Unlock()
		return v, true, nil
	}
	if !e.busy { // the first fetch failed: try again for this caller
		e.ready = make(chan struct{})
		p.startLocked(key, e)
	}
	ready := e.ready
	p.mu.Unlock()
	select {
	case <-ready:
	case <-ctx.Done():
		var zero T
		return zero, false, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.ok {
		return e.val, false, nil
	}
	return e.val, false, e.err
}

// startLocked starts a background fetch of key. With p.mu held.
func (p *polled[T]) startLocked(key string, e *polledEntry[T]) {
	e.busy = true
	ready := e.ready
	started := p.g.spawn(func() {
		ctx, cancel := context.WithTimeout(p.g.ctx, p.g.cfg.UpstreamTimeout)
		v, err := p.fetch(ctx, key)
		cancel()
		p.mu.Lock()
		e.busy = false
		switch {
		case err == nil:
			e.val, e.ok, e.err, e.fetched = v, true, nil, time.Now()
		case !e.ok:
			e.err = err
		default:
			p.g.log.Debug("poll failed: keeping the last answer", "key", key, "err", err)
		}
		p.mu.Unlock()
		closeChan(ready)
	})
	if !started { // the gateway is closing
		e.busy = false
		e.err = ErrClosed
		closeChan(ready)
	}
}

func closeChan(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// forget drops keys not asked for within idle.
func (p *polled[T]) forget(idle time.Duration) {
	cut := time.Now().Add(-idle)
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.entries {
		if !e.busy && e.asked.Before(cut) {
			delete(p.entries, k)
		}
	}
}

func (p *polled[T]) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}
