// Package broker keeps a broker registered with every edgereg node: the
// registrar does what RocketMQ's registerBrokerAll does, without its flaws.
//
// A Registrar runs one session per node, in parallel, each on its own
// goroutine owned by the Registrar. A session dials the node, registers the
// broker's full topic configuration, and then renews its lease with a
// heartbeat every HeartbeatInterval, recording every acknowledgement
// (epoch, lease deadline). After a reconnect it resumes the lease with a
// heartbeat naming the epoch it holds; it registers in full again only
// when the node says it must: a heartbeat acknowledgement says the node
// holds another data version, or the node answers lease-not-found or
// stale-epoch (it restarted, or expired the lease). A failed request is
// retried after a short backoff rather than a full interval, so a lossy
// link does not cost the lease; a connection that is gone, that failed
// twice in a row, or on which a request carrying topics (whose timeout
// grows with them) timed out, is replaced, with exponential backoff and
// full jitter between attempts. While a request carrying topics is in
// flight for longer than a heartbeat interval, the lease is heartbeaten
// beside it on a stream of its own; a heartbeat that gets no answer then
// replaces the connection at once (a path MTU that shrank under it
// blackholes every full-size packet).
//
// # Timings, restarts and refusals
//
// Every acknowledgement says the node's heartbeat interval and the lease's
// threshold; the Registrar heartbeats at least as often as the tightest
// node asks (HeartbeatInterval). An idle session pings its node every
// ProbeInterval with a ping padded to draw a QUIC stateless reset from a
// node that restarted, so a restart is noticed within one probe interval.
// A refusal that retrying cannot change (not authorized for the group,
// invalid, stale state, conflict) ends that node's session: WaitSynced
// returns it at once, Config.OnStateChange delivers it, and Run returns
// once every listed node has refused.
//
// Topic changes (SetTopics, UpsertTopics, RefreshTopics, RemoveTopics) bump the data
// version and reach every node as small incremental updates; a node that
// no longer knows the broker gets the full configuration instead.
//
// Stop unregisters from every node in parallel, naming the epoch of each
// registration, so a late unregister never removes a newer registration.
//
// # Node list changes
//
// The node list comes from a nodes.Source, read again every
// NodeRefreshInterval. A node added to the list is registered with at once.
// A node removed from the list is dropped without unregistering: its
// session is closed and its lease there runs out by itself. This is what
// RocketMQ does (it just stops talking to the node), and it is the safe
// choice when a list shrinks by mistake, as a DNS or address-server
// glitch can make it do: the routes stay served until the lease expires,
// and come back at the next registration if the node returns.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/nodes"
)

// Lifecycle errors.
var (
	// ErrStarted is returned by Start on a Registrar already started.
	ErrStarted = errors.New("broker registrar already started")
	// ErrStopped is returned by calls on a stopped or closed Registrar.
	ErrStopped = errors.New("broker registrar stopped")
	// ErrRefused is matched (errors.Is) by every RefusedError.
	ErrRefused = errors.New("node refused the broker")
	// ErrNotStarted is no longer returned: WaitSynced before Start waits
	// for the start. It is kept for callers that compare with it.
	ErrNotStarted = errors.New("broker registrar not started")
)

// RefusedError is a node's permanent refusal of the broker: a full
// registration answered with bad request, frame too large, unknown message
// type, not authorized, stale state or conflict. Retrying cannot change
// the answer, so the session with that node stops; the Registrar gives up
// (Run returns) once every listed node has refused. errors.Is matches
// ErrRefused and the node's code (wire.ErrNotAuthorized, ...).
type RefusedError struct {
	Node string // the node's address
	Op   string // the request refused: "register"
	Err  error  // the node's answer, a *wire.Error
}

// Error says the refusal is for good and why.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused for good: %v", e.Err)
}

// Unwrap returns the node's answer.
func (e *RefusedError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

type lifecycle uint8

const (
	stateNew lifecycle = iota
	stateRunning
	stateStopped
)

// NodeState is what a Registrar knows about its session with one node.
type NodeState struct {
	// Addr is the node's address as the node source lists it.
	Addr string
	// NodeID is the identity the node gave in its last Pong (PROTOCOL.md
	// 8.11), learnt on every connection; empty until it answered one.
	NodeID string
	// SameNodeAs is the address of another listed session that reaches
	// the same node (the same NodeID, started at the same time: nodes
	// cloned from one data directory share a NodeID and are still two
	// nodes): a source that lists one node under
	// two names. This session then stands by, connected and pinging,
	// while that one keeps the lease (two sessions holding one lease
	// would replace each other's registration at every heartbeat, each
	// answered stale-epoch); it takes over, resuming the lease, if that
	// session loses its connection. Empty otherwise.
	SameNodeAs string
	// Connected reports whether a QUIC connection to the node is up.
	Connected bool
	// Registered reports whether the node acknowledged the registration,
	// or its resumption, over the current connection and nothing said
	// since that it lost it. After a reconnect it is false until the node
	// acknowledges a heartbeat naming the held epoch (leases outlive
	// connections) or, when the node lost the lease, the full registration.
	Registered bool
	// Epoch is the epoch of the last acknowledged registration; later
	// frames name it. Zero before the first registration.
	Epoch uint64
	// DataVersion is the data version the node last acknowledged.
	DataVersion wire.DataVersion
	// LastAck is when the last acknowledgement (registration, heartbeat or
	// topic update) arrived.
	LastAck time.Time
	// LeaseDeadline is when the lease runs out unless renewed, by the
	// node's clock.
	LeaseDeadline time.Time
	// NodeHeartbeatInterval and Threshold are what the node's last
	// acknowledgement said: the heartbeat period it expects, and how long
	// this lease may go without a heartbeat. Zero from nodes that do not
	// say. The Registrar heartbeats at least as often as the tightest node
	// asks (see Registrar.HeartbeatInterval).
	NodeHeartbeatInterval, Threshold time.Duration
	// MasterAddr and MasterHAAddr tell a slave where its group's master
	// is, as the last registration acknowledgement said.
	MasterAddr, MasterHAAddr string
	// LastError is why the most recent request or dial failed; empty once
	// one succeeds again.
	LastError string
	// Refused is the node's permanent refusal (a *RefusedError), after
	// which the session with it stopped; nil otherwise.
	Refused error
	// Registrations, Heartbeats and Updates count acknowledged full
	// registrations, heartbeats and incremental topic updates; Dials counts
	// connections made; Resumes counts reconnects that kept the lease with
	// a heartbeat (counted in Heartbeats too) instead of registering again.
	Registrations, Heartbeats, Updates, Dials, Resumes uint64
}

// Registrar keeps one broker registered with every node of a node source.
// Its methods are safe for concurrent use.
type Registrar struct {
	cfg         Config
	log         *slog.Logger
	hbTimeoutMs uint64
	backoff     nodes.Backoff // cfg.Backoff, capped at the probe interval

	mu       sync.Mutex
	state    lifecycle
	topics   map[string]wire.TopicConfig
	version  wire.DataVersion
	full     []wire.TopicConfig // sorted topics of version; nil until needed
	sessions map[string]*session
	listed   bool          // the node list was read at least once
	changed  chan struct{} // closed and replaced on every state change
	beat     time.Duration // heartbeat interval in effect: see HeartbeatInterval
	refused  chan struct{} // closed once every listed node refused the broker
	fatal    error         // those refusals, joined; set when refused closes

	stopFollow context.CancelFunc
	wg         sync.WaitGroup // the follow loop and every session

	// reportMu serializes OnStateChange calls, so that a session checks it
	// is still listed and reports before a session replacing it can
	// (session.update). Taken before mu, never under it.
	reportMu sync.Mutex
}

// New validates cfg and returns a Registrar; Start (or Run) sets it going.
func New(cfg Config) (*Registrar, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Registrar{
		cfg:         cfg,
		log:         cfg.Logger.With("cluster", cfg.Identity.Cluster, "broker", cfg.Identity.BrokerName, "addr", cfg.Identity.Addr),
		hbTimeoutMs: uint64(cfg.HeartbeatTimeout.Milliseconds()),
		backoff:     cfg.Backoff,
		topics:      make(map[string]wire.TopicConfig, len(cfg.Topics)),
		version:     wire.DataVersion{State: cfg.Identity.StateVersion, Timestamp: cfg.Now().UnixMilli()},
		sessions:    make(map[string]*session),
		changed:     make(chan struct{}),
		refused:     make(chan struct{}),
		beat:        cfg.HeartbeatInterval,
	}
	if cfg.ProbeInterval > 0 {
		// A node that is down is dialled again within half a probe
		// interval of a failed dial, so one that comes back is found
		// within about one (a dial in progress retransmits its first
		// packet with growing gaps, the last ones seconds apart), as a
		// node whose connection is still up is by the next probe.
		r.backoff.Max = max(min(r.backoff.Max, cfg.ProbeInterval/2), r.backoff.Min)
	}
	for _, t := range cfg.Topics {
		r.topics[t.Name] = t
	}
	return r, nil
}

// Start begins keeping the broker registered with every node the source
// lists, and returns at once. Use WaitSynced to wait until every node has
// acknowledged the registration.
func (r *Registrar) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.state {
	case stateRunning:
		return ErrStarted
	case stateStopped:
		return ErrStopped
	}
	r.state = stateRunning
	r.broadcastLocked() // a WaitSynced called before Start waits on
	ctx, cancel := context.WithCancel(context.Background())
	r.stopFollow = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		nodes.Follow(ctx, r.cfg.Nodes, nodes.FollowConfig{
			Interval:      r.cfg.NodeRefreshInterval,
			LookupTimeout: r.cfg.RequestTimeout,
			Backoff:       r.cfg.Backoff,
			Logger:        r.log,
		}, r.setNodes)
	}()
	return nil
}

// Run starts the registrar, keeps the broker registered until ctx ends,
// then unregisters from every node (bounded by RequestTimeout) and
// returns. It returns nil after a clean unregistration. When every listed
// node has refused the broker for good (see RefusedError) it stops at
// once and returns the refusals.
func (r *Registrar) Run(ctx context.Context) error {
	if err := r.Start(); err != nil {
		return err
	}
	var fatal error
	select {
	case <-ctx.Done():
	case <-r.refused:
		r.mu.Lock()
		fatal = r.fatal
		r.mu.Unlock()
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.RequestTimeout)
	defer cancel()
	return errors.Join(fatal, r.Stop(sctx))
}

// checkRefusedLocked gives up when every listed node has refused the
// broker. With mu held.
func (r *Registrar) checkRefusedLocked() {
	if r.fatal != nil || !r.listed || len(r.sessions) == 0 {
		return
	}
	var errs []error
	for _, addr := range slices.Sorted(maps.Keys(r.sessions)) {
		st := r.sessions[addr].st
		if st.Refused == nil {
			return
		}
		errs = append(errs, st.Refused)
	}
	r.fatal = errors.Join(errs...)
	r.log.Error("every node refused the broker: giving up", "nodes", len(errs), "err", r.fatal)
	close(r.refused)
}

// MinNodeHeartbeatInterval is the shortest heartbeat interval a node can
// make a Registrar follow, whatever it says.
const MinNodeHeartbeatInterval = time.Second

// HeartbeatInterval returns the heartbeat interval in effect: the
// configured one, or shorter where a node asks for it. Each node's
// acknowledgements say the node's heartbeat interval and the lease's
// threshold; the Registrar follows the tightest node, heartbeating every
// node at least as often as that node's interval and a third of its
// threshold (never below MinNodeHeartbeatInterval), so a node run with
// shorter timings than the broker's does not expire it.
func (r *Registrar) HeartbeatInterval() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.beat
}

// advisedInterval is how often a node's last acknowledgement asks the
// broker to heartbeat; zero when it said nothing.
func (st *NodeState) advisedInterval() time.Duration {
	var d time.Duration
	for _, v := range []time.Duration{st.NodeHeartbeatInterval, st.Threshold / 3} {
		if v > 0 && (d == 0 || v < d) {
			d = v
		}
	}
	if d == 0 {
		return 0
	}
	return max(d, MinNodeHeartbeatInterval)
}

// followLocked sets the heartbeat interval from the configured one and
// every listed node's advice, logging a change. With mu held.
func (r *Registrar) followLocked() {
	iv, from := r.cfg.HeartbeatInterval, ""
	for _, addr := range slices.Sorted(maps.Keys(r.sessions)) {
		if d := r.sessions[addr].st.advisedInterval(); d > 0 && d < iv {
			iv, from = d, addr
		}
	}
	if iv == r.beat {
		return
	}
	if from != "" {
		st := r.sessions[from].st
		r.log.Info("following the tightest node's timings: heartbeating more often than configured", "node", from,
			"interval", iv, "configured", r.cfg.HeartbeatInterval,
			"node_interval", st.NodeHeartbeatInterval, "threshold", st.Threshold)
	} else {
		r.log.Info("back to the configured heartbeat interval", "interval", iv)
	}
	if iv < r.beat {
		for _, s := range r.sessions {
			s.signal() // reschedule heartbeats planned at the longer interval
		}
	}
	r.beat = iv
}

// refusalsLocked joins the refusals of listed nodes. With mu held.
func (r *Registrar) refusalsLocked() error {
	var errs []error
	for _, addr := range slices.Sorted(maps.Keys(r.sessions)) {
		if err := r.sessions[addr].st.Refused; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Stop unregisters the broker from every node in parallel, naming each
// registration's epoch, and closes every connection. ctx bounds the whole
// shutdown: requests still in flight when it ends are abandoned, and those
// nodes expire the lease by themselves. It returns the unregistrations that
// failed, joined; a node that no longer holds the lease, or holds a newer
// registration of the broker's address (another instance started first),
// is no failure. A Registrar cannot be started again.
func (r *Registrar) Stop(ctx context.Context) error {
	return r.shutdown(ctx, true)
}

// Close stops the registrar at once without unregistering: the nodes keep
// the broker's routes until its leases expire, as after a crash.
func (r *Registrar) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return r.shutdown(ctx, false)
}

func (r *Registrar) shutdown(ctx context.Context, unregister bool) error {
	r.mu.Lock()
	switch r.state {
	case stateNew:
		r.state = stateStopped
		r.broadcastLocked()
		r.mu.Unlock()
		return nil
	case stateStopped:
		r.mu.Unlock()
		return ErrStopped
	}
	r.state = stateStopped
	sessions := slices.Collect(maps.Values(r.sessions))
	for _, s := range sessions {
		s.unregister = unregister
	}
	r.broadcastLocked()
	r.mu.Unlock()

	r.stopFollow()
	stopOps := context.AfterFunc(ctx, func() {
		for _, s := range sessions {
			s.stopOps()
		}
	})
	defer stopOps()
	for _, s := range sessions {
		s.stopRun()
	}
	r.wg.Wait()
	var errs []error
	refused, held := 0, 0
	for _, s := range sessions {
		if s.st.Refused != nil { // every session goroutine has ended
			refused++
		}
		if s.st.Epoch != 0 {
			held++
		}
		s.stopOps()
		if s.unregErr != nil {
			errs = append(errs, s.unregErr)
		}
	}
	switch {
	case unregister && refused == len(sessions):
		r.log.Info("broker registrar stopped: no node had accepted the broker", "refused", refused)
	case unregister && held == 0:
		// Nothing to unregister: saying "unregistered" would claim a
		// registration no node ever acknowledged.
		r.log.Info("broker registrar stopped: no node had registered the broker", "nodes", len(sessions), "refused", refused)
	case unregister && len(errs) > 0:
		// Not "unregistered": each node that missed it routes to the
		// broker until the lease runs out.
		r.log.Warn("broker not unregistered from every node", "nodes", len(sessions)-refused, "failed", len(errs),
			"refused", refused, "err", errors.Join(errs...))
	case unregister:
		r.log.Info("broker unregistered", "nodes", len(sessions)-refused, "refused", refused)
	}
	return errors.Join(errs...)
}

// setNodes is the follow loop's callback: it starts a session for every new
// node and drops the sessions of nodes no longer listed.
func (r *Registrar) setNodes(addrs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != stateRunning {
		return
	}
	r.listed = true
	for addr, s := range r.sessions {
		if !slices.Contains(addrs, addr) {
			r.log.Info("node left the node list: dropping its session without unregistering", "node", addr)
			delete(r.sessions, addr)
			s.stopOps()
			s.stopRun()
		}
	}
	r.followLocked()
	for _, addr := range addrs {
		if _, ok := r.sessions[addr]; ok {
			continue
		}
		s := newSession(r, addr)
		r.sessions[addr] = s
		r.wg.Add(1)
		go s.run()
	}
	r.checkRefusedLocked() // the nodes left may all have refused
	r.broadcastLocked()
}

// Nodes returns the state of the session with every listed node, sorted by
// address.
func (r *Registrar) Nodes() []NodeState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]NodeState, 0, len(r.sessions))
	for _, s := range r.sessions {
		out = append(out, s.st)
	}
	slices.SortFunc(out, func(a, b NodeState) int { return strings.Compare(a.Addr, b.Addr) })
	return out
}

// WaitSynced waits until the node list has been read and every listed node
// has acknowledged the current data version over its current connection.
// Call it to wait for the registration, or after a topic change to wait
// until every node applied it. Called before Start (as with go r.Run(ctx)
// followed by WaitSynced), it waits for the start too. It returns
// ErrStopped once the registrar stops, the refusal (a RefusedError) as
// soon as a node refused the broker for good, since the broker can then
// never be registered everywhere, and ctx's error when ctx ends first.
func (r *Registrar) WaitSynced(ctx context.Context) error {
	for {
		r.mu.Lock()
		state, synced, refused, ch := r.state, r.syncedLocked(), r.refusalsLocked(), r.changed
		r.mu.Unlock()
		switch {
		case refused != nil:
			return refused
		case state == stateStopped:
			return ErrStopped
		case synced:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for registration with every node: %w", ctx.Err())
		case <-ch:
		}
	}
}

func (r *Registrar) syncedLocked() bool {
	if !r.listed || len(r.sessions) == 0 {
		return false
	}
	for _, s := range r.sessions {
		if s.st.SameNodeAs != "" {
			continue // the session it stands by for counts
		}
		if !s.st.Registered || s.st.DataVersion != r.version {
			return false
		}
	}
	return true
}

// broadcastLocked wakes every WaitSynced. With mu held.
func (r *Registrar) broadcastLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// HasTopic reports whether the broker's topic configuration holds topic,
// without copying it.
func (r *Registrar) HasTopic(topic string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.topics[topic]
	return ok
}

// Topics returns the broker's topic configuration, sorted by name.
func (r *Registrar) Topics() []wire.TopicConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.fullTopicsLocked())
}

// DataVersion returns the current data version of the topic configuration.
func (r *Registrar) DataVersion() wire.DataVersion {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version
}

// SetTopics replaces the broker's topic configuration. The difference to
// the current one goes to every node as an incremental update. It returns
// without waiting for the nodes; see WaitSynced.
func (r *Registrar) SetTopics(topics []wire.TopicConfig) error {
	if err := validateTopics(topics); err != nil {
		return err
	}
	next := make(map[string]wire.TopicConfig, len(topics))
	for _, t := range topics {
		next[t.Name] = t
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == stateStopped {
		return ErrStopped
	}
	delta := make(map[string]*wire.TopicConfig)
	for name := range r.topics {
		if _, ok := next[name]; !ok {
			delta[name] = nil
		}
	}
	for name, t := range next {
		if old, ok := r.topics[name]; !ok || old != t {
			delta[name] = &t
		}
	}
	r.topics = next
	r.bumpLocked(delta)
	return nil
}

// UpsertTopics adds topics or changes their configuration, and sends the
// change to every node.
func (r *Registrar) UpsertTopics(topics ...wire.TopicConfig) error {
	return r.upsert(topics, false)
}

// RefreshTopics is UpsertTopics that sends every topic given to every
// node, changed or not: a node may no longer route one the registrar holds
// (an operator deleted it there), and a topic the broker creates again must
// be routed again.
func (r *Registrar) RefreshTopics(topics ...wire.TopicConfig) error {
	return r.upsert(topics, true)
}

func (r *Registrar) upsert(topics []wire.TopicConfig, all bool) error {
	if err := validateTopics(topics); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == stateStopped {
		return ErrStopped
	}
	delta := make(map[string]*wire.TopicConfig, len(topics))
	for _, t := range topics {
		if old, ok := r.topics[t.Name]; ok && old == t && !all {
			continue
		}
		r.topics[t.Name] = t
		delta[t.Name] = &t
	}
	r.bumpLocked(delta)
	return nil
}

// RemoveTopics removes topics from the broker, and sends the change to
// every node. Names the broker does not hold are ignored.
func (r *Registrar) RemoveTopics(names ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == stateStopped {
		return ErrStopped
	}
	delta := make(map[string]*wire.TopicConfig, len(names))
	for _, name := range names {
		if _, ok := r.topics[name]; ok {
			delete(r.topics, name)
			delta[name] = nil
		}
	}
	r.bumpLocked(delta)
	return nil
}

// bumpLocked records a topic change: a new data version, and the change
// queued for every session. Nothing changes for an empty delta.
func (r *Registrar) bumpLocked(delta map[string]*wire.TopicConfig) {
	if len(delta) == 0 {
		return
	}
	r.version.Counter++
	r.version.Timestamp = r.cfg.Now().UnixMilli()
	r.full = nil
	for _, s := range r.sessions {
		if s.pending == nil {
			s.pending = make(map[string]*wire.TopicConfig, len(delta))
		}
		maps.Copy(s.pending, delta)
		s.signal()
	}
	r.broadcastLocked()
}

// fullTopicsLocked returns the sorted topic list of the current version,
// built once per version and shared by every registration: do not modify.
func (r *Registrar) fullTopicsLocked() []wire.TopicConfig {
	if r.full == nil {
		r.full = slices.SortedFunc(maps.Values(r.topics), func(a, b wire.TopicConfig) int {
			switch {
			case a.Name < b.Name:
				return -1
			case a.Name > b.Name:
				return 1
			}
			return 0
		})
		if r.full == nil {
			r.full = []wire.TopicConfig{} // encodes as an empty list, not null
		}
	}
	return r.full
}
