package wasm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// pool keeps up to size instances of one module for one hook, prepared
// off the call path: a call takes an idle instance or waits for one, under
// its own deadline, and never waits for an instantiation (a Go guest's
// _initialize takes hundreds of milliseconds). A filler goroutine
// replaces every instance a call discards. An instance is used by one call
// at a time; a call that failed in any way hands its instance back as
// unhealthy and the pool closes it, so a trap or a timeout never leaves
// state behind for the next call.
//
// Every instance holds a token of the host's instance budget, so the
// instances of all modules and hooks together stay within it.
type pool struct {
	size    int
	newInst func(context.Context) (*instance, error)
	budget  chan struct{} // the host's; one token per live instance

	idle chan *instance // capacity size
	need chan struct{}  // wakes the filler; capacity 1
	done chan struct{}  // closed by close
	// ctx is canceled by close, ending an instantiation in progress;
	// filling is done when the filler has returned.
	ctx     context.Context
	cancel  context.CancelFunc
	filling sync.WaitGroup

	// inUse counts instances handed out and not yet given back; discarded
	// counts instances closed after the module failed a call, until their
	// replacements are made; made counts instances created. Once the pool
	// has been full (made >= size), a call that finds no instance while
	// none is in use and at least two were discarded (one failure alone
	// never counts twice) was starved by the module itself: every instance
	// it had is being replaced after its failures.
	inUse, discarded, made atomic.Int64

	mu      sync.Mutex
	live    int // idle, in use or being created
	started bool
	closed  bool
	lastErr error // the filler's last instantiation error
}

func newPool(size int, budget chan struct{}, newInst func(context.Context) (*instance, error)) *pool {
	p := &pool{size: size, newInst: newInst, budget: budget,
		idle: make(chan *instance, size), need: make(chan struct{}, 1), done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// warm starts the filler, once: pools of modules never called hold no
// instances beyond the dry run's.
func (p *pool) warm() {
	p.mu.Lock()
	if !p.started && !p.closed {
		p.started = true
		p.filling.Add(1)
		go p.fill()
	}
	p.mu.Unlock()
	p.wake()
}

func (p *pool) wake() {
	select {
	case p.need <- struct{}{}:
	default:
	}
}

// get returns an idle instance, waiting for one until ctx is done.
func (p *pool) get(ctx context.Context) (*instance, error) {
	select {
	case in := <-p.idle:
		p.inUse.Add(1)
		return in, nil
	default:
	}
	p.warm()
	select {
	case in := <-p.idle:
		p.inUse.Add(1)
		return in, nil
	case <-p.done:
		return nil, fmt.Errorf("policy module %w", ErrClosed)
	case <-ctx.Done():
		if p.made.Load() >= int64(p.size) && p.inUse.Load() == 0 && p.discarded.Load() >= int64(min(p.size, 2)) {
			return nil, fmt.Errorf("%w: %w", ErrStarved, ctx.Err())
		}
		p.mu.Lock()
		err := p.lastErr
		p.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("%w: %w (instances fail to start: %v)", ErrBusy, ctx.Err(), err)
		}
		return nil, fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
	}
}

// getNew returns an idle instance or creates one on the caller's
// goroutine: for the dry run, which must see an instantiation fail.
func (p *pool) getNew(ctx context.Context) (*instance, error) {
	select {
	case in := <-p.idle:
		p.inUse.Add(1)
		return in, nil
	default:
	}
	if !p.reserve() {
		return nil, fmt.Errorf("%w: the instance budget is spent", ErrBusy)
	}
	in, err := p.newInst(ctx)
	if err != nil {
		p.unreserve()
		return nil, err
	}
	p.created()
	p.inUse.Add(1)
	return in, nil
}

// created counts a new instance: past the first size, each replaces one
// closed earlier, so one discard fewer is owed.
func (p *pool) created() {
	if p.made.Add(1) <= int64(p.size) {
		return
	}
	for d := p.discarded.Load(); d > 0 && !p.discarded.CompareAndSwap(d, d-1); d = p.discarded.Load() {
	}
}

// reserve counts a new instance against the pool's size and the host's
// budget, without waiting.
func (p *pool) reserve() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.live >= p.size {
		return false
	}
	select {
	case p.budget <- struct{}{}:
	default:
		return false
	}
	p.live++
	return true
}

func (p *pool) unreserve() {
	p.mu.Lock()
	p.live--
	p.mu.Unlock()
	<-p.budget
	p.wake()
}

// put returns an instance; an unhealthy one (the module failed its call)
// is closed and replaced, and counts as discarded until its replacement is
// idle.
func (p *pool) put(in *instance, healthy bool) {
	p.inUse.Add(-1)
	if p.offer(in, healthy) {
		return
	}
	if !healthy {
		p.discarded.Add(1)
	}
	in.close()
	p.unreserve()
}

// offer makes in idle unless the pool is closed or in is unhealthy. The
// send happens under p.mu, so close, which drains idle under p.mu, never
// misses an instance; it never blocks: at most size instances are live.
func (p *pool) offer(in *instance, healthy bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !healthy || p.closed {
		return false
	}
	p.idle <- in
	return true
}

// fill keeps size instances live until the pool closes. A module whose
// instances fail to start is retried with backoff, not in a hot loop.
func (p *pool) fill() {
	defer p.filling.Done()
	backoff := 10 * time.Millisecond
	for {
		select {
		case <-p.need:
		case <-p.done:
			return
		}
		for p.reserveWaiting() {
			in, err := p.newInst(p.ctx)
			p.mu.Lock()
			p.lastErr = err
			p.mu.Unlock()
			if err != nil {
				p.unreserve()
				select {
				case <-time.After(backoff):
				case <-p.done:
					return
				}
				backoff = min(2*backoff, 5*time.Second)
				continue
			}
			backoff = 10 * time.Millisecond
			p.created()
			if !p.offer(in, true) {
				in.close()
				p.unreserve()
				return
			}
		}
	}
}

// reserveWaiting is reserve for the filler: it waits for a budget token
// while the pool is below its size.
func (p *pool) reserveWaiting() bool {
	p.mu.Lock()
	if p.closed || p.live >= p.size {
		p.mu.Unlock()
		return false
	}
	p.live++
	p.mu.Unlock()
	select {
	case p.budget <- struct{}{}:
		return true
	case <-p.done:
		p.mu.Lock()
		p.live--
		p.mu.Unlock()
		return false
	}
}

// close closes the idle instances and stops the filler, waiting for it
// (an instantiation in progress is canceled): the runtime may be closed
// next, and must not be while an instance is being made. Instances in use
// are closed when put back.
func (p *pool) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	p.cancel()
	p.mu.Unlock()
	p.filling.Wait()
	p.mu.Lock()
	var idle []*instance
	for len(p.idle) > 0 {
		idle = append(idle, <-p.idle)
	}
	p.mu.Unlock()
	for _, in := range idle {
		in.close()
		p.unreserve()
	}
}

// liveCount reports the live instances, for tests.
func (p *pool) liveCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live
}

// idleCount reports the idle instances, for tests.
func (p *pool) idleCount() int { return len(p.idle) }
