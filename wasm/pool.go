package wasm

import (
	"context"
	"fmt"
	"sync"
)

// pool keeps up to size instances of one module. An instance is used by
// one call at a time; a call that failed in any way hands its instance
// back as unhealthy and the pool closes it, so a trap or a timeout never
// leaves state behind for the next call.
type pool struct {
	slots   chan struct{} // one token per instance handed out
	newInst func(context.Context) (*instance, error)

	mu     sync.Mutex
	idle   []*instance
	closed bool
}

func newPool(size int, newInst func(context.Context) (*instance, error)) *pool {
	return &pool{slots: make(chan struct{}, size), newInst: newInst}
}

// get returns an idle instance or a new one, waiting while size instances
// are in use until ctx is done.
func (p *pool) get(ctx context.Context) (*instance, error) {
	select {
	case p.slots <- struct{}{}:
	default:
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
		}
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		return nil, fmt.Errorf("policy module %w", ErrClosed)
	}
	if n := len(p.idle); n > 0 {
		in := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return in, nil
	}
	p.mu.Unlock()
	in, err := p.newInst(ctx)
	if err != nil {
		<-p.slots
		return nil, err
	}
	return in, nil
}

// put returns an instance; an unhealthy one is closed.
func (p *pool) put(in *instance, healthy bool) {
	p.mu.Lock()
	if healthy && !p.closed {
		p.idle = append(p.idle, in)
		in = nil
	}
	p.mu.Unlock()
	if in != nil {
		in.close()
	}
	<-p.slots
}

// close closes the idle instances; those in use are closed when put back.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, in := range idle {
		in.close()
	}
}

// idleCount reports the idle instances, for tests.
func (p *pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}
