package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/nodes"
)

// NodeState is what the gateway knows about its link to one node, from the
// probes it sends every ProbeInterval.
type NodeState struct {
	Addr string `json:"addr"`
	// Up reports whether the last probe was answered.
	Up bool `json:"up"`
	// LastOK is when a probe or a read was last answered.
	LastOK time.Time `json:"last_ok,omitzero"`
	// LastError is why the last probe or read failed; empty while up.
	LastError string `json:"last_error,omitempty"`
	// WarmingUp: the last probe's answer said the node is within its
	// warm-up window (it started recently, and brokers may not have
	// registered with it yet). Reads go to such a node only when no node
	// past its warm-up answers.
	WarmingUp bool `json:"warming_up,omitempty"`
}

// upstream keeps one QUIC connection per listed node for the reads the route
// client does not cover (cluster info, topic lists, member groups), probes
// every node, and reports each node's state for metrics and health.
type upstream struct {
	g   *Gateway
	cfg *Config

	mu    sync.Mutex
	nodes []*upNode // listed nodes, sorted by address
}

// upNode is the link to one node.
type upNode struct {
	addr   string
	ctx    context.Context // ends when the node leaves the list or the gateway closes
	cancel context.CancelFunc

	// slot is a one-place semaphore guarding conn, held while dialling; a
	// channel so a waiter gives up when its own context ends.
	slot     chan struct{}
	conn     *client.Conn
	failures atomic.Int32 // requests failed in a row on conn

	// Guarded by upstream.mu.
	st NodeState
}

func newUpstream(g *Gateway) *upstream { return &upstream{g: g, cfg: &g.cfg} }

// setNodes is the follow loop's callback.
func (u *upstream) setNodes(addrs []string) {
	u.mu.Lock()
	if u.g.ctx.Err() != nil {
		u.mu.Unlock()
		return
	}
	var next, gone []*upNode
	for _, a := range addrs {
		if i := slices.IndexFunc(u.nodes, func(n *upNode) bool { return n.addr == a }); i >= 0 {
			next = append(next, u.nodes[i])
			continue
		}
		ctx, cancel := context.WithCancel(u.g.ctx)
		next = append(next, &upNode{addr: a, ctx: ctx, cancel: cancel, slot: make(chan struct{}, 1), st: NodeState{Addr: a}})
	}
	for _, n := range u.nodes {
		if !slices.Contains(addrs, n.addr) {
			gone = append(gone, n)
		}
	}
	u.nodes = next
	u.mu.Unlock()
	for _, n := range gone {
		n.close()
	}
	u.g.probeNow()
}

// states returns every listed node's state, sorted by address.
func (u *upstream) states() []NodeState {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]NodeState, len(u.nodes))
	for i, n := range u.nodes {
		out[i] = n.st
	}
	return out
}

// anyUp reports whether some node answered its last probe.
func (u *upstream) anyUp() bool {
	return slices.ContainsFunc(u.states(), func(s NodeState) bool { return s.Up })
}

// record keeps the outcome of a probe or read of n, and logs a change:
// the first failure after a start or an answer (with the reason: the
// nodes refused the gateway's credential, the WAN is cut), and the first
// answer after failures. Without it a gateway no node answered logged
// nothing until a client asked for a topic it had not cached.
func (u *upstream) record(n *upNode, err error) {
	u.mu.Lock()
	wasUp, hadFailed := n.st.Up, n.st.LastError != ""
	if err == nil {
		n.st.Up, n.st.LastOK, n.st.LastError = true, time.Now(), ""
	} else {
		n.st.Up, n.st.LastError = false, err.Error()
	}
	u.mu.Unlock()
	switch {
	case err != nil && !hadFailed:
		u.g.log.Warn("node does not answer the gateway", "node", n.addr, "was_up", wasUp, "err", err)
	case err == nil && hadFailed:
		u.g.log.Info("node answers the gateway again", "node", n.addr)
	}
}

// probe pings every listed node in parallel, each bounded by RequestTimeout.
func (u *upstream) probe() {
	u.mu.Lock()
	list := slices.Clone(u.nodes)
	u.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range list {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(n.ctx, u.cfg.RequestTimeout)
			defer cancel()
			var pong wire.Pong
			err := n.do(ctx, u.cfg, func(c *client.Conn, _ bool) (err error) { pong, err = c.Ping(ctx); return err })
			if n.ctx.Err() == nil {
				if err == nil { // before Up is recorded, so no read sees it up and not warming
					u.mu.Lock()
					n.st.WarmingUp = pong.WarmingUp
					u.mu.Unlock()
				}
				u.record(n, err)
			}
		})
	}
	wg.Wait()
}

// read runs fn against one node after another, until one answers: nodes
// that answered their last probe past their warm-up first, then those
// warming up, then the others. Cluster info, topic lists and member groups
// have no warming-up status: a node that restarted answers them, empty,
// from what it holds, and the answer would be cached and served for a
// poll interval. So a read that has to dial a node (its connection failed,
// as a restart makes it) pings it first, and one found warming up is asked
// only after every other; a read that fails on a node marks it down until
// its next probe. An answer that is an error another node could not
// improve on (not found, bad request) is returned as is.
func (u *upstream) read(ctx context.Context, fn func(context.Context, *client.Conn) error) error {
	return u.readMany(ctx, 1, fn)
}

// readMany is read asking nodes, in read's order, until want of them
// answered (or every node was tried): nodes share nothing, and what one
// lacks (brokers it is cut off from) another may hold, so callers merge the
// answers. fn is called once per node that answers. It returns nil when
// fn succeeded on some node, else the first answer that was an error (not
// found: no node knows the name), else why no node answered.
func (u *upstream) readMany(ctx context.Context, want int, fn func(context.Context, *client.Conn) error) error {
	u.mu.Lock()
	var list, warming, down []*upNode
	for _, n := range u.nodes {
		switch {
		case n.st.Up && !n.st.WarmingUp:
			list = append(list, n)
		case n.st.Up:
			warming = append(warming, n)
		default:
			down = append(down, n)
		}
	}
	u.mu.Unlock()
	probed := len(list) + len(warming) // nodes past this answered their last probe
	list = append(append(list, warming...), down...)
	if len(list) == 0 {
		return errNoNodes
	}
	var errs []error
	var later []*upNode // found warming up on a new connection: asked last
	answered, succeeded := 0, false
	var answerErr error
	try := func(n *upNode, check bool) (done bool, err error) {
		rctx, cancel := context.WithTimeout(ctx, u.cfg.RequestTimeout)
		defer cancel()
		warm := false
		err = n.do(rctx, u.cfg, func(c *client.Conn, dialled bool) error {
			if dialled && check {
				// A new connection may reach a node that restarted since
				// its last probe: ask it first whether it is warming up.
				p, err := c.Ping(rctx)
				if err != nil {
					return err
				}
				u.mu.Lock()
				n.st.WarmingUp = p.WarmingUp
				u.mu.Unlock()
				if warm = p.WarmingUp; warm {
					return nil
				}
			}
			return fn(rctx, c)
		})
		if warm && err == nil {
			return false, nil
		}
		if err == nil || !tryNext(err) {
			if err == nil || isAnswer(err) {
				u.record(n, nil)
			}
			return true, err
		}
		if !isAnswer(err) && ctx.Err() == nil && n.ctx.Err() == nil {
			// Not up any more, until a probe says otherwise: a node that
			// restarted fails its old connection, and the next read would
			// dial it anew as the node that answered, empty and warming
			// up, before the next probe tells.
			u.record(n, err)
		}
		errs = append(errs, fmt.Errorf("%s: %w", n.addr, err))
		return false, err
	}
	// answer counts a node's answer and reports whether enough came.
	answer := func(err error) bool {
		answered++
		if err == nil {
			succeeded = true
		} else {
			answerErr = cmp.Or(answerErr, err)
		}
		return answered >= want
	}
	result := func() error {
		if succeeded {
			return nil
		}
		return answerErr
	}
	for i, n := range list {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		if i >= probed && answered > 0 {
			// A node down at its last probe is a failover, not a second
			// witness worth a dial timeout.
			break
		}
		done, err := try(n, true)
		switch {
		case done:
			if answer(err) {
				return result()
			}
		case err == nil:
			later = append(later, n)
		}
	}
	for _, n := range later {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		if done, err := try(n, false); done && answer(err) {
			return result()
		}
	}
	if answered > 0 {
		return result()
	}
	return fmt.Errorf("%w: %w", errUnreachable, errors.Join(errs...))
}

// do runs fn on the node's connection, dialling it first if needed (fn is
// told whether it did). A connection whose request failed below the
// protocol is dropped, so the next use dials afresh.
func (n *upNode) do(ctx context.Context, cfg *Config, fn func(c *client.Conn, dialled bool) error) error {
	select {
	case n.slot <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if n.ctx.Err() != nil {
		<-n.slot
		return errNodeGone
	}
	if n.conn != nil && isDone(n.conn.Done()) {
		n.conn.Close()
		n.conn = nil
	}
	dialled := false
	if n.conn == nil {
		dctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
		stop := context.AfterFunc(n.ctx, cancel)
		c, err := client.Dial(dctx, n.addr, client.Config{TLS: cfg.TLS, RequestTimeout: cfg.RequestTimeout, Transport: cfg.Transport})
		stop()
		cancel()
		if err != nil {
			<-n.slot
			return err
		}
		n.conn = c
		dialled = true
	}
	conn := n.conn
	<-n.slot // requests share the connection; only dialling is exclusive
	err := fn(conn, dialled)
	switch {
	case err == nil || isAnswer(err):
		n.failures.Store(0)
	case errors.Is(err, context.Canceled) || n.ctx.Err() != nil:
		// The caller or the gateway gave up: says nothing about the path.
	case n.failures.Add(1) >= maxNodeFailures:
		// QUIC retransmits by itself: failures in a row (timeouts
		// included) mean the path is broken; dial afresh next time.
		n.failures.Store(0)
		n.slot <- struct{}{}
		if n.conn == conn {
			conn.Close()
			n.conn = nil
		}
		<-n.slot
	}
	return err
}

// maxNodeFailures is how many requests in a row may fail on a node's
// connection before it is replaced.
const maxNodeFailures = 2

func (n *upNode) close() {
	n.cancel()
	n.slot <- struct{}{}
	defer func() { <-n.slot }()
	if n.conn != nil {
		n.conn.Close()
		n.conn = nil
	}
}

func (u *upstream) close() {
	u.mu.Lock()
	list := u.nodes
	u.nodes = nil
	u.mu.Unlock()
	for _, n := range list {
		n.close()
	}
}

var (
	errNoNodes     = errors.New("no edgereg node listed")
	errNodeGone    = errors.New("node left the node list")
	errUnreachable = errors.New("no edgereg node answered")
)

// isAnswer reports whether err is a node's answer rather than a failure to
// get one.
func isAnswer(err error) bool {
	var we *wire.Error
	return errors.As(err, &we)
}

// tryNext reports whether another node may answer where this one did not: it
// could not be reached, or is warming up, busy or stopping.
func tryNext(err error) bool {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code == wire.CodeWarmingUp || we.Code == wire.CodeUnavailable || we.Code == wire.CodeOverloaded
	}
	return true
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// followNodes reads the node source every NodeRefreshInterval until the
// gateway closes, for the upstream and for the list its route client and
// registrars follow.
func (g *Gateway) followNodes() {
	nodes.Follow(g.ctx, g.cfg.Nodes, nodes.FollowConfig{
		Interval:      g.cfg.NodeRefreshInterval,
		LookupTimeout: g.cfg.RequestTimeout,
		Backoff:       g.cfg.Backoff,
		Logger:        g.log,
	}, func(addrs []string) {
		g.nodeList.Set(addrs...)
		g.up.setNodes(addrs)
	})
}
