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

// errSharedDial wraps the failure of a dial that another caller made while
// this one waited for it: the node is not dialled again at once, and the
// failure is counted once (by the caller that dialled).
var errSharedDial = errors.New("dial failed while waiting for it")

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
	// dials counts dials that ended; dialErr is the last one's error.
	dials   uint64
	dialErr error
	// id is the node's identity from its last answer (PROTOCOL.md 7.13,
	// 8.11): its NodeID and start time (wire.NodeKey). A list may name one node
	// under two names, and two answers of one node are one witness, not
	// two.
	id string
}

func newNode(c *Client, addr string) *node {
	ctx, cancel := context.WithCancel(c.ctx)
	return &node{c: c, addr: addr, ctx: ctx, cancel: cancel, slot: make(chan struct{}, 1)}
}

// get returns the node's connection, dialling it if there is none or it is
// gone. Concurrent callers wait for one dial.
//
// A caller that waited while another caller's dial failed gets that
// failure (wrapped in errSharedDial) instead of dialling again: readers
// queued on a dead node would otherwise dial it one after another, each
// for a full RequestTimeout.
func (n *node) get(ctx context.Context) (*client.Conn, error) {
	n.health.Lock()
	seen := n.dials
	n.health.Unlock()
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
	n.health.Lock()
	shared := n.dials != seen && n.dialErr != nil
	err := n.dialErr
	n.health.Unlock()
	if shared {
		return nil, fmt.Errorf("%w: %w", errSharedDial, err)
	}
	conn, err := n.dial(ctx)
	n.health.Lock()
	n.dials++
	n.dialErr = err
	if ctx.Err() != nil {
		n.dialErr = nil // cut short by this caller: says nothing to the others
	}
	n.health.Unlock()
	if err != nil {
		return nil, err
	}
	n.conn = conn
	return conn, nil
}

// dial dials the node, with the slot held.
func (n *node) dial(ctx context.Context) (*client.Conn, error) {
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

// unreachable reports whether the node's last dial failed and its backoff
// still runs: a query asks it only when it must (see firstAsks).
func (n *node) unreachable(now time.Time) bool {
	n.health.Lock()
	defer n.health.Unlock()
	return n.dialErr != nil && now.Before(n.retryAt)
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

// identity returns the node's identity (wire.NodeKey) from its last answer;
// empty before it answered or from an older node.
func (n *node) identity() string {
	n.health.Lock()
	defer n.health.Unlock()
	return n.id
}

// identified records the node's identity from an answer (wire.NodeKey).
func (n *node) identified(id string) {
	if id == "" {
		return
	}
	n.health.Lock()
	n.id = id
	n.health.Unlock()
}

// sameNodes moves every node that gave the NodeID of a node before it in
// ns to the end, keeping the order otherwise: a list naming one node under
// two names (its address and a DNS name) must not have a read ask it twice
// as two witnesses while a distinct node waits.
func sameNodes(ns []*node) []*node {
	seen := make(map[string]bool, len(ns))
	out := make([]*node, 0, len(ns))
	var dups []*node
	for _, n := range ns {
		id := n.identity()
		if id != "" && seen[id] {
			dups = append(dups, n)
			continue
		}
		seen[id] = true
		out = append(out, n)
	}
	return append(out, dups...)
}
