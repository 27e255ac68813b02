package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
)

// maxTransportFailures is how many requests in a row may fail on a
// connection that still looks up before it is replaced: QUIC retransmits
// by itself, so two timeouts in a row mean the path is broken.
const maxTransportFailures = 2

// session keeps the broker registered with one node. Its goroutine (run)
// is owned by the Registrar, which stops it with stopRun (and, for requests
// in flight, stopOps) and waits for it on Registrar.wg.
type session struct {
	r    *Registrar
	addr string
	log  *slog.Logger

	// runCtx ends the session's loop; opCtx bounds requests in flight. Stop
	// ends runCtx at once but opCtx only when its own ctx ends, so a
	// registration in flight completes and its epoch can be unregistered.
	runCtx  context.Context
	stopRun context.CancelFunc
	opCtx   context.Context
	stopOps context.CancelFunc
	wake    chan struct{} // a topic change is pending, or the interval shrank
	beatAt  time.Time     // when the next heartbeat was scheduled; run's goroutine only

	// Guarded by Registrar.mu.
	st         NodeState
	pending    map[string]*wire.TopicConfig // nil value: remove
	unregister bool
	nodeKey    string // the node's NodeID and start time, from its last Pong: see samenode.go

	// unregErr is set by run before it returns; read after Registrar.wg.Wait.
	unregErr error
}

func newSession(r *Registrar, addr string) *session {
	s := &session{
		r:    r,
		addr: addr,
		log:  r.log.With("node", addr),
		wake: make(chan struct{}, 1),
		st:   NodeState{Addr: addr},
	}
	s.runCtx, s.stopRun = context.WithCancel(context.Background())
	s.opCtx, s.stopOps = context.WithCancel(context.Background())
	return s
}

func (s *session) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run dials the node, serves the connection until it must be replaced,
// and redials with backoff, until the session is stopped.
func (s *session) run() {
	defer s.r.wg.Done()
	var conn *client.Conn
	defer func() { s.finish(conn) }()
	failures := 0
	dialFails := 0 // consecutive failed dials
	for s.runCtx.Err() == nil {
		if conn == nil {
			c, err := s.dial(dialFails == 0)
			if err != nil {
				if s.runCtx.Err() != nil {
					return
				}
				s.failed("dial", err, failures)
				failures++
				dialFails++
				if !s.sleep(nil, s.r.backoff.Delay(failures-1)) {
					return
				}
				continue
			}
			conn = c
			dialFails = 0
		}
		refused := s.serve(conn, &failures)
		if s.runCtx.Err() != nil {
			return // finish unregisters over conn if asked to
		}
		if refused != nil {
			s.refuse(refused)
			return
		}
		conn.Close()
		conn = nil
		s.update(func(st *NodeState) { st.Connected, st.Registered = false, false })
		s.log.Debug("reconnecting to node")
		if !s.sleep(nil, s.r.backoff.Delay(failures)) {
			return
		}
	}
}

// dial connects to the node. A patient dial waits up to DialTimeout, as a
// node queueing handshakes in a reconnect storm needs; after a failed dial
// the next ones wait only RequestTimeout. A node that is down answers no
// dial, and QUIC retransmits a dial's Initial with exponential backoff: a
// dial that has waited 15 s for a node is resent seconds apart, so when the
// node comes back it would be found seconds late, where a fresh short dial
// finds it within its first retransmissions (node/simtest
// TestNodeCrashAndRestart, 3 min outage: the last broker back 6.5 s after the
// restart with patient redials, within 6 s with short ones).
func (s *session) dial(patient bool) (*client.Conn, error) {
	cfg := &s.r.cfg
	timeout := cfg.DialTimeout
	if !patient {
		timeout = min(timeout, cfg.RequestTimeout)
	}
	ctx, cancel := context.WithTimeout(s.runCtx, timeout)
	defer cancel()
	c, err := client.Dial(ctx, s.addr, client.Config{TLS: cfg.TLS, RequestTimeout: cfg.RequestTimeout, Transport: cfg.Transport})
	if err != nil {
		return nil, err
	}
	s.update(func(st *NodeState) { st.Connected = true; st.Dials++ })
	return c, nil
}

// serve registers over conn and keeps the lease renewed until the
// connection must be replaced or the session stops. failures counts
// consecutive failed requests and dials, for the backoff. It returns the
// node's refusal when the node refused the full registration for good.
func (s *session) serve(conn *client.Conn, failures *int) *RefusedError {
	// A lease outlives its connection: one held from an earlier connection
	// is resumed with a heartbeat naming its epoch, and only a node that
	// says it lost the lease or holds another version gets the full
	// configuration again (up to 16 MiB over a link that just failed).
	resuming := s.heldEpoch() != 0
	needFull := !resuming
	transportFails := 0
	var nextBeat, nextProbe time.Time
	defer s.identify(conn)()
	for s.runCtx.Err() == nil {
		var (
			op  string
			err error
		)
		if s.standingBy() {
			if !s.standBy(conn) {
				return nil
			}
			resuming = s.heldEpoch() != 0
			needFull, nextBeat = !resuming, time.Time{}
			continue
		}
		nextBeat = s.tighten(nextBeat)
		switch {
		case resuming:
			var again bool
			op = "resume"
			again, err = s.resume(conn)
			switch {
			case err == nil:
				resuming, needFull, nextBeat = false, again, s.nextBeat()
			case errors.Is(err, wire.ErrLeaseNotFound), errors.Is(err, wire.ErrStaleEpoch):
				// The node restarted, expired the lease or holds a newer
				// registration: not a failure, the answer a full
				// registration is for.
				s.log.Info("node no longer holds the lease: registering in full", "err", err)
				resuming, needFull = false, true
				continue
			}
		case needFull:
			op, err = "register", s.register(conn)
			if err == nil {
				needFull, nextBeat = false, s.nextBeat()
			}
		case s.hasPending():
			op, err = "update-topics", s.updateTopics(conn)
			if err == nil {
				nextBeat = s.nextBeat() // an update renews the lease too
			}
		case !time.Now().Before(nextBeat) && s.seekingMaster():
			// A heartbeat acknowledgement does not say where the master
			// is: a slave that does not know yet registers again instead.
			op, err = "register", s.register(conn)
			if err == nil {
				nextBeat = s.nextBeat()
			}
		case !time.Now().Before(nextBeat):
			var again bool
			op = "heartbeat"
			again, err = s.heartbeat(conn)
			if err == nil {
				needFull, nextBeat = again, s.nextBeat()
			}
		case s.probing() && !time.Now().Before(nextProbe):
			op, err = "ping", s.probe(conn)
		default:
			wait := time.Until(nextBeat)
			if s.probing() {
				wait = min(wait, time.Until(nextProbe))
			}
			if !s.idle(conn, wait) {
				return nil
			}
			continue
		}
		if err == nil {
			*failures, transportFails = 0, 0
			nextProbe = time.Now().Add(s.r.cfg.ProbeInterval)
			continue
		}
		if s.runCtx.Err() != nil || s.opCtx.Err() != nil {
			return nil
		}
		if permanent(err) {
			if op == "register" {
				return &RefusedError{Node: s.addr, Op: op, Err: err}
			}
			// A heartbeat or an update refused for good (say, the lease
			// at this address is another group's now): the full
			// registration decides whether the broker may stay.
			s.failed(op, err, 0)
			resuming, needFull = false, true
			s.update(func(st *NodeState) { st.Registered = false })
			continue
		}
		s.failed(op, err, *failures)
		*failures++
		var we *wire.Error
		switch {
		case errors.Is(err, wire.ErrLeaseNotFound), errors.Is(err, wire.ErrStaleEpoch),
			errors.Is(err, wire.ErrNotGroupLeader):
			// The node restarted, expired the lease, or holds a newer
			// registration; a slave's topic change needs a full
			// registration too. Register at once the first time.
			needFull = true
			s.update(func(st *NodeState) { st.Registered = false })
			if *failures == 1 {
				continue
			}
		case errors.Is(err, wire.ErrUnavailable):
			return nil // the node is shutting down: reconnect, perhaps to its successor
		case errors.As(err, &we):
			if op == "update-topics" {
				needFull = true // re-synchronize by a full registration
			}
		default:
			transportFails++
			if op == "register" || op == "update-topics" {
				// A request carrying topics had a budget that grows with
				// them and still got no answer: the path fails its
				// full-size packets (a path MTU that shrank), and the same
				// connection would fail the retry the same way, with the
				// lease running out meanwhile. A new connection starts
				// from small packets.
				transportFails = maxTransportFailures
			}
			if transportFails >= maxTransportFailures || isDone(conn.Done()) {
				return nil
			}
		}
		if !s.sleep(conn, s.r.backoff.Delay(*failures-1)) {
			return nil
		}
	}
	return nil
}

func (s *session) probing() bool { return s.r.cfg.ProbeInterval > 0 }

// permanent reports whether a node's answer will not change by retrying:
// the request is invalid or too large, the node does not know the message
// type, the certificate does not allow the group, or the broker id or
// group belongs elsewhere (stale state, conflict). Retrying those for
// ever would look healthy from outside while the broker is registered
// nowhere.
func permanent(err error) bool {
	for _, target := range []error{wire.ErrBadRequest, wire.ErrFrameTooLarge, wire.ErrUnknownType,
		wire.ErrNotAuthorized, wire.ErrStaleState, wire.ErrConflict} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// refuse records that the node refused the broker for good: the session
// ends without retrying, and the Registrar gives up once every listed node
// has refused.
func (s *session) refuse(err *RefusedError) {
	s.log.Error("node refused the broker: not retrying this node", "op", err.Op, "err", err.Err)
	s.update(func(st *NodeState) {
		st.Connected, st.Registered = false, false
		st.Refused, st.LastError = err, err.Error()
	})
	s.r.mu.Lock()
	s.r.checkRefusedLocked()
	s.r.mu.Unlock()
}

// probeBody pads every probe: quic-go answers no packet of 42 bytes or
// less with a stateless reset, and a bare ping's packet has 36, so a
// restarted node would not answer it at all and the broker would learn of
// the restart only when the ping timed out twice (10 to 15 s at the
// defaults). The node ignores the padding. Read-only.
var probeBody = &wire.Ping{Padding: make([]byte, wire.PingPadding)}

// probe pings the node with a packet large enough to draw a stateless
// reset from a node that restarted and no longer knows the connection.
func (s *session) probe(conn *client.Conn) error {
	var pong wire.Pong
	err := s.do(conn, func(ctx context.Context) error {
		return conn.Call(ctx, wire.TypePing, probeBody, &pong)
	})
	if err == nil {
		s.learnt(pong)
	}
	return err
}

// nextBeat is when the next heartbeat is due: one interval from now, less
// up to a tenth at random, so brokers started together drift apart.
func (s *session) nextBeat() time.Time {
	iv := s.r.HeartbeatInterval()
	s.beatAt = time.Now()
	return s.beatAt.Add(iv - rand.N(iv/10+1))
}

// tighten pulls a scheduled heartbeat in when the interval in effect
// shrank since it was scheduled (another node asked for shorter).
func (s *session) tighten(next time.Time) time.Time {
	if at := s.beatAt.Add(s.r.HeartbeatInterval()); !next.IsZero() && at.Before(next) {
		return at
	}
	return next
}

// idle waits up to d for a topic change; it returns false when the session
// stops or the connection goes.
func (s *session) idle(conn *client.Conn, d time.Duration) bool {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-s.runCtx.Done():
		return false
	case <-conn.Done():
		return false
	case <-s.wake:
	case <-t.C:
	}
	return true
}

// sleep waits d; it returns false when the session stops or conn (if not
// nil) goes.
func (s *session) sleep(conn *client.Conn, d time.Duration) bool {
	var gone <-chan struct{}
	if conn != nil {
		gone = conn.Done()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.runCtx.Done():
		return false
	case <-gone:
		return false
	case <-t.C:
		return true
	}
}

func (s *session) opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.opCtx, s.r.cfg.RequestTimeout)
}

// do runs one request on conn bounded by RequestTimeout and opCtx. A
// request to a node that stopped reading gives up at that deadline too
// (client.Pipe bounds its writes by the context).
func (s *session) do(conn *client.Conn, fn func(context.Context) error) error {
	return s.doTopics(conn, 0, fn)
}

// timePerTopic is how much longer than RequestTimeout a request carrying
// topics (a full registration, a topic update) may take, per topic: about
// 32 KB/s. A registration of 20,000 topics (0.65 MB) takes some 10 s to
// cross a 100 ms link losing 10 % of its packets; bounded by RequestTimeout
// alone, every attempt was cut and started over, and the broker never
// registered.
const timePerTopic = time.Millisecond

// doTopics is do for a request carrying n topics. While one carrying
// topics is in flight, the held lease is heartbeaten beside it (see
// beatDuring).
func (s *session) doTopics(conn *client.Conn, n int, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(s.opCtx, s.r.cfg.RequestTimeout+time.Duration(n)*timePerTopic)
	defer cancel()
	if n > 0 {
		defer s.beatDuring(conn)()
	}
	return fn(ctx)
}

// beatDuring heartbeats the held lease every heartbeat interval over conn
// until the returned stop is called (and returns once it has), so a long
// request does not cost the lease. A registration or topic update of many
// topics may take far longer than a heartbeat interval on a bad link (its
// timeout grows by timePerTopic per topic), and the session sends nothing
// else meanwhile: the node expired the broker while the request it was
// waiting for still crawled (wire/broker TestPathMTUDropAndDuplicates: a
// topic update stalled by a shrunk path MTU, the lease gone after the
// threshold with no heartbeat sent). A heartbeat the node answers with an
// error (the lease is gone, say) changes nothing: the request in flight
// decides; one that gets no answer at all closes the connection (see
// sideBeat).
func (s *session) beatDuring(conn *client.Conn) (stop func()) {
	if s.heldEpoch() == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(s.opCtx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(s.r.HeartbeatInterval())
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			s.sideBeat(ctx, conn)
			t.Reset(s.r.HeartbeatInterval())
		}
	}()
	return func() { cancel(); <-done }
}

// sideBeat is one heartbeat of beatDuring, bounded by RequestTimeout. It
// records a success, and nothing else: an acknowledgement saying the node
// holds another version may just mean the request in flight was applied.
func (s *session) sideBeat(ctx context.Context, conn *client.Conn) {
	r := s.r
	id := &r.cfg.Identity
	r.mu.Lock()
	req := &wire.Heartbeat{Cluster: id.Cluster, Addr: id.Addr, Epoch: s.st.Epoch, DataVersion: s.st.DataVersion}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	// On a stream of its own: on the shared pipe it would queue behind
	// the long request's bytes, and time out on a link merely slow.
	var ack wire.LeaseAck
	err := conn.CallOnce(ctx, wire.TypeHeartbeat, req, &ack)
	var we *wire.Error
	switch {
	case err == nil:
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return // stopped: the request in flight ended
	case errors.As(err, &we):
		return // the node answered: the connection works
	default:
		// A small request on a stream of its own got nowhere within a
		// request timeout while the long one crawls: the connection is
		// wedged (a path MTU that shrank under it blackholes every
		// full-size packet, and quic-go never sends smaller ones again on
		// that path). Close it: the long request fails at once, and the
		// session reconnects and resumes the lease.
		s.log.Warn("heartbeat beside a long request got no answer: replacing the connection", "err", err)
		conn.Close()
		return
	}
	s.update(func(st *NodeState) {
		if st.Epoch != req.Epoch {
			return // registered anew meanwhile
		}
		st.Heartbeats++
		ack.VersionChanged = true // keep the acknowledged version as it is
		s.ackLocked(st, ack, req.DataVersion)
	})
}

// register sends the full topic configuration of the current version.
func (s *session) register(conn *client.Conn) error {
	r := s.r
	id := &r.cfg.Identity
	r.mu.Lock()
	req := &wire.Register{
		Cluster: id.Cluster, BrokerName: id.BrokerName, BrokerID: id.BrokerID, Addr: id.Addr,
		HAAddr: id.HAAddr, Zone: id.Zone, ActingMaster: id.ActingMaster,
		DataVersion: r.version, Topics: r.fullTopicsLocked(), HeartbeatTimeoutMs: r.hbTimeoutMs,
	}
	carried := s.pending // the full configuration carries every change so far
	s.pending = nil
	r.mu.Unlock()

	var ack wire.RegisterAck
	err := s.doTopics(conn, len(req.Topics), func(ctx context.Context) (err error) {
		ack, err = conn.Register(ctx, req)
		return err
	})
	if err != nil {
		// The node may still hold the lease at the old version, and a
		// reconnect then resumes it with a heartbeat that finds nothing
		// amiss: the changes carried must stay queued, or they never
		// reach the node (wire/broker
		// TestTopicChangeSurvivesAFailedFullRegistration).
		s.requeue(carried)
		return fmt.Errorf("register with %s: %w", s.addr, err)
	}
	var first bool
	s.update(func(st *NodeState) {
		first = st.Registrations == 0
		st.Registrations++
		st.Registered = true
		st.MasterAddr, st.MasterHAAddr = ack.MasterAddr, ack.MasterHAAddr
		s.ackLocked(st, ack.Lease, req.DataVersion)
	})
	msg := "registered with node"
	if !first {
		msg = "registered with node again"
	}
	s.log.Info(msg, "epoch", ack.Lease.Epoch, "topics", len(req.Topics), "version", req.DataVersion.Counter)
	return nil
}

// seekingMaster reports whether the broker is a slave that has not yet
// learnt its master's address from this node.
func (s *session) seekingMaster() bool {
	if s.r.cfg.Identity.BrokerID == wire.MasterID {
		return false
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	return s.st.MasterAddr == ""
}

func (s *session) hasPending() bool {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	return len(s.pending) > 0
}

// updateTopics sends the changes queued since the last acknowledged
// version. If it fails they are queued again, under any newer change.
func (s *session) updateTopics(conn *client.Conn) error {
	r := s.r
	id := &r.cfg.Identity
	r.mu.Lock()
	delta := s.pending
	s.pending = nil
	req := &wire.UpdateTopics{Cluster: id.Cluster, Addr: id.Addr, Epoch: s.st.Epoch, DataVersion: r.version}
	r.mu.Unlock()
	for name, t := range delta {
		if t == nil {
			req.Remove = append(req.Remove, name)
		} else {
			req.Upsert = append(req.Upsert, *t)
		}
	}
	slices.Sort(req.Remove)
	slices.SortFunc(req.Upsert, func(a, b wire.TopicConfig) int { return strings.Compare(a.Name, b.Name) })

	var ack wire.LeaseAck
	err := s.doTopics(conn, len(req.Upsert)+len(req.Remove), func(ctx context.Context) (err error) {
		ack, err = conn.UpdateTopics(ctx, req)
		return err
	})
	if err != nil {
		s.requeue(delta)
		return fmt.Errorf("update topics on %s: %w", s.addr, err)
	}
	s.update(func(st *NodeState) {
		st.Updates++
		s.ackLocked(st, ack, req.DataVersion)
	})
	s.log.Debug("topics updated on node", "upsert", len(req.Upsert), "remove", len(req.Remove), "version", req.DataVersion.Counter)
	return nil
}

// requeue queues again the changes of a request that failed, under any
// change queued since (which is newer).
func (s *session) requeue(delta map[string]*wire.TopicConfig) {
	if len(delta) == 0 {
		return
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if s.pending == nil {
		s.pending = delta
		return
	}
	for name, t := range delta {
		if _, newer := s.pending[name]; !newer {
			s.pending[name] = t
		}
	}
}

// heldEpoch returns the epoch of the lease the node last acknowledged, or
// zero before the first registration.
func (s *session) heldEpoch() uint64 {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	return s.st.Epoch
}

// resume renews, over a new connection, the lease held from an earlier
// one. It returns true when the node asks for a full registration; on
// success without that the session counts as registered again.
func (s *session) resume(conn *client.Conn) (bool, error) {
	again, err := s.heartbeat(conn)
	if err != nil || again {
		return again, err
	}
	var epoch uint64
	s.update(func(st *NodeState) { st.Registered, st.Resumes, epoch = true, st.Resumes+1, st.Epoch })
	s.log.Info("resumed the lease on node", "epoch", epoch)
	return false, nil
}

// heartbeat renews the lease. It names the data version the node last
// acknowledged, so a topic change still queued does not read as a
// mismatch; it returns true when the node asks for a full registration.
func (s *session) heartbeat(conn *client.Conn) (bool, error) {
	r := s.r
	id := &r.cfg.Identity
	r.mu.Lock()
	req := &wire.Heartbeat{Cluster: id.Cluster, Addr: id.Addr, Epoch: s.st.Epoch, DataVersion: s.st.DataVersion}
	r.mu.Unlock()

	var ack wire.LeaseAck
	err := s.do(conn, func(ctx context.Context) (err error) {
		ack, err = conn.Heartbeat(ctx, req)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("heartbeat to %s: %w", s.addr, err)
	}
	s.update(func(st *NodeState) {
		st.Heartbeats++
		s.ackLocked(st, ack, req.DataVersion)
	})
	if ack.VersionChanged {
		s.log.Info("node holds another data version: registering in full")
	}
	return ack.VersionChanged, nil
}

// ackLocked records an acknowledgement. With Registrar.mu held.
func (s *session) ackLocked(st *NodeState, ack wire.LeaseAck, v wire.DataVersion) {
	st.Epoch = ack.Epoch
	st.LeaseDeadline = time.UnixMilli(ack.DeadlineMs)
	st.LastAck = s.r.cfg.Now()
	st.LastError = ""
	if !ack.VersionChanged {
		st.DataVersion = v
	}
	st.NodeHeartbeatInterval = time.Duration(ack.HeartbeatIntervalMs) * time.Millisecond
	st.Threshold = time.Duration(ack.ThresholdMs) * time.Millisecond
	s.r.followLocked()
}

// update changes the session's state under the Registrar's lock and wakes
// WaitSynced. A session dropped from the list no longer reports.
//
// When Connected, Registered or Refused changed, it then calls
// Config.OnStateChange, after unlocking: updates come from the session's
// goroutine only, so one node's changes are delivered in order. The call
// is made under Registrar.reportMu, by a session still listed: a dropped
// session's report, held between the unlock and the call, used to reach
// the application after the report of the session that replaced it when
// the node was listed again, leaving it with the old session's state.
// Lock order: reportMu, then mu (taken and released to look).
func (s *session) update(fn func(*NodeState)) {
	r := s.r
	r.mu.Lock()
	before := s.st
	fn(&s.st)
	after := s.st
	if before.Connected && !after.Connected {
		r.wakeSameNodeLocked(s)
	}
	r.broadcastLocked()
	r.mu.Unlock()
	if cb := r.cfg.OnStateChange; cb != nil && (before.Connected != after.Connected ||
		before.Registered != after.Registered || before.Refused != after.Refused) {
		if testHookStateChange != nil {
			testHookStateChange(after)
		}
		r.reportMu.Lock()
		defer r.reportMu.Unlock()
		r.mu.Lock()
		listed := r.sessions[s.addr] == s
		r.mu.Unlock()
		if listed {
			cb(after)
		}
	}
}

// testHookStateChange, when set, runs between a session's update and its
// OnStateChange call; tests use it to hold a callback there.
var testHookStateChange func(NodeState)

// failed records and logs a failed request: at Warn the first time in a
// row, at Debug while it keeps failing.
func (s *session) failed(op string, err error, failures int) {
	s.update(func(st *NodeState) { st.LastError = err.Error() })
	level := slog.LevelWarn
	if failures > 0 {
		level = slog.LevelDebug
	}
	s.log.Log(context.Background(), level, "request to node failed: retrying", "op", op, "failures", failures+1, "err", err)
}

// finish unregisters when the Registrar is stopping, then closes the
// connection.
func (s *session) finish(conn *client.Conn) {
	s.r.mu.Lock()
	unregister, epoch := s.unregister, s.st.Epoch
	s.r.mu.Unlock()
	if unregister && epoch != 0 {
		conn, s.unregErr = s.sendUnregister(conn, epoch)
	}
	if conn != nil {
		conn.Close()
	}
	s.update(func(st *NodeState) { st.Connected, st.Registered = false, false })
}

// sendUnregister removes the registration of epoch, dialling again if the
// connection is gone. A lease the node no longer holds counts as removed.
func (s *session) sendUnregister(conn *client.Conn, epoch uint64) (*client.Conn, error) {
	cfg := &s.r.cfg
	if conn != nil && isDone(conn.Done()) {
		conn.Close()
		conn = nil
	}
	if conn == nil {
		ctx, cancel := s.opContext()
		c, err := client.Dial(ctx, s.addr, client.Config{TLS: cfg.TLS, RequestTimeout: cfg.RequestTimeout, Transport: cfg.Transport})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("unregister from %s: %w", s.addr, err)
		}
		conn = c
	}
	err := s.do(conn, func(ctx context.Context) error {
		return conn.Unregister(ctx, &wire.Unregister{Cluster: cfg.Identity.Cluster, Addr: cfg.Identity.Addr, Epoch: epoch})
	})
	switch {
	case err == nil:
		s.log.Debug("unregistered from node", "epoch", epoch)
		return conn, nil
	case errors.Is(err, wire.ErrLeaseNotFound):
		return conn, nil // expired already
	case errors.Is(err, wire.ErrStaleEpoch):
		// A newer registration of this address holds the lease (another
		// instance of the broker started first): ours is gone already,
		// and that one is not ours to remove (PROTOCOL.md: a stale
		// unregister needs nothing more).
		s.log.Info("a newer registration holds the lease on node: leaving it", "epoch", epoch, "err", err)
		return conn, nil
	}
	return conn, fmt.Errorf("unregister from %s (epoch %d): %w", s.addr, epoch, err)
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
