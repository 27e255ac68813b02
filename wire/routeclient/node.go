package routeclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/edgereg/edgereg/wire/client"
)

// errNodeGone is returned for a node that left the node list.
var errNodeGone = errors.New("node left the node list")

// maxNodeFailures is how many requests in a row may fail on a node's
// connection before it is closed and dialled anew.
const maxNodeFailures = 2

// node is the client's connection to one listed node, dialled on first use.
type node struct {
	c    *Client
	addr string
	// ctx ends when the node leaves the list or the client closes; it
	// aborts a dial in progress.
	ctx    context.Context
	cancel context.CancelFunc

	// slot is a one-place semaphore guarding conn, held while dialling. A
	// channel rather than a mutex, so a caller waiting for someone else's
	// dial still gives up when its own context ends.
	slot chan struct{}
	conn *client.Conn

	// health is apart from slot so choosing nodes never waits for a dial.
	health   sync.Mutex
	failures int
	retryAt  time.Time
	state    ConnState // last reported to Config.OnConnState
}

func newNode(c *Client, addr string) *node {
	ctx, cancel := context.WithCancel(c.ctx)
	return &node{c: c, addr: addr, ctx: ctx, cancel: cancel, slot: make(chan struct{}, 1)}
}

// get returns the node's connection, dialling it if there is none or it is
// gone. Concurrent callers wait for one dial.
func (n *node) get(ctx context.Context) (*client.Conn, error) {
	select {
	case n.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer n.unlock()
	if n.ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %w", n.addr, errNodeGone)
	}
	if n.conn != nil {
		select {
		case <-n.conn.Done():
			n.conn.Close()
			n.conn = nil
		default:
			return n.conn, nil
		}
	}
	dctx, cancel := context.WithTimeout(ctx, n.c.cfg.RequestTimeout)
	stop := context.AfterFunc(n.ctx, cancel)
	conn, err := client.Dial(dctx, n.addr, client.Config{TLS: n.c.cfg.TLS, RequestTimeout: n.c.cfg.RequestTimeout, Transport: n.c.cfg.Transport})
	stop()
	cancel()
	if err != nil {
		if n.ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", n.addr, errNodeGone)
		}
		if ctx.Err() == nil {
			n.report(err)
		}
		if permanent(err) {
			return nil, fmt.Errorf("%w: %w", ErrRefused, err)
		}
		return nil, err
	}
	n.conn = conn
	n.report(nil)
	return conn, nil
}

// failed records a failed request: the node is tried last for a while, and
// after repeated failures its connection is replaced.
func (n *node) failed() {
	n.health.Lock()
	n.failures++
	n.retryAt = time.Now().Add(n.c.cfg.Backoff.Ceiling(n.failures - 1))
	replace := n.failures >= maxNodeFailures
	n.health.Unlock()
	if replace {
		n.lock()
		if n.conn != nil {
			n.conn.Close()
			n.conn = nil
		}
		n.unlock()
	}
}

// succeeded records an answered request.
func (n *node) succeeded() {
	n.health.Lock()
	n.failures, n.retryAt = 0, time.Time{}
	n.health.Unlock()
}

func (n *node) backingOff(now time.Time) bool {
	n.health.Lock()
	defer n.health.Unlock()
	return now.Before(n.retryAt)
}

// close ends the node's use: a dial in progress is aborted and the
// connection, with any stream on it, is closed.
func (n *node) close() {
	n.cancel() // aborts a dial in progress, so the slot frees soon
	n.lock()
	defer n.unlock()
	if n.conn != nil {
		n.conn.Close()
		n.conn = nil
	}
}

func (n *node) lock()   { n.slot <- struct{}{} }
func (n *node) unlock() { <-n.slot }
