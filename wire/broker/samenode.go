package broker

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
)

// This file keeps one lease per node when the node source lists a node
// under two names (an address and a DNS name, a service name beside a pod
// address). A lease is (Cluster, Addr) on a node, and every registration
// gets a new epoch: two sessions with one node would each register, each
// find the other's epoch newer at its next heartbeat (stale epoch), and
// register in full again, for ever: a full registration per heartbeat
// over the WAN. Sessions learn their node's identity from a ping on
// every connection (PROTOCOL.md 8.11); of those that reach one node, one
// keeps the lease and the others stand by (NodeState.SameNodeAs). A node
// is its NodeID and its start time together: nodes whose data directories
// were copied from one another share a NodeID, but not the millisecond
// they started in.

// identify pings the node beside whatever else the session sends on a new
// connection, and records the NodeID it answers. The returned func stops
// it and waits for it to end.
func (s *session) identify(conn *client.Conn) (stop func()) {
	ctx, cancel := context.WithTimeout(s.opCtx, s.r.cfg.RequestTimeout)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var pong wire.Pong
		// On a stream of its own, so it does not queue behind a
		// registration on the shared pipe.
		if err := conn.CallOnce(ctx, wire.TypePing, probeBody, &pong); err == nil {
			s.learnt(pong)
		}
	}()
	return func() { cancel(); <-done }
}

// learnt records the node's identity and, when it changed, wakes the
// session to look for another session with the same node.
func (s *session) learnt(p wire.Pong) {
	if p.NodeID == "" {
		return
	}
	key := wire.NodeKey(p.NodeID, p.StartedMs)
	r := s.r
	r.mu.Lock()
	changed := s.nodeKey != key
	s.nodeKey, s.st.NodeID = key, p.NodeID
	r.mu.Unlock()
	if changed {
		s.signal()
	}
}

// sameNodeLocked returns the session that keeps the lease on s's node for
// it: another listed session with the same node (NodeID and start time),
// connected, not standing by itself and not refused. With r.mu held.
func (r *Registrar) sameNodeLocked(s *session) *session {
	id := s.nodeKey
	if id == "" {
		return nil
	}
	for _, addr := range slices.Sorted(maps.Keys(r.sessions)) {
		o := r.sessions[addr]
		if o != s && o.nodeKey == id && o.st.Connected && o.st.SameNodeAs == "" && o.st.Refused == nil {
			return o
		}
	}
	return nil
}

// wakeSameNodeLocked wakes the sessions standing by for s, which lost its
// connection: one of them takes the lease over. With r.mu held.
func (r *Registrar) wakeSameNodeLocked(s *session) {
	for _, o := range r.sessions {
		if o != s && o.st.SameNodeAs == s.addr {
			o.signal()
		}
	}
}

// standingBy reports whether another session keeps the lease on this
// session's node. The session then stands by: it holds no epoch (so it
// never unregisters the other's lease) and no queued topic change; an
// epoch it was acknowledged later than the other, for the same data
// version, is handed over, so the other's next heartbeat is not refused
// as stale.
func (s *session) standingBy() bool {
	r := s.r
	r.mu.Lock()
	o := r.sameNodeLocked(s)
	r.mu.Unlock()
	if o == nil {
		return false
	}
	s.update(func(st *NodeState) {
		if o = r.sameNodeLocked(s); o == nil {
			return
		}
		if st.Epoch != 0 && st.LastAck.After(o.st.LastAck) && st.DataVersion == o.st.DataVersion {
			o.st.Epoch, o.st.LeaseDeadline, o.st.LastAck = st.Epoch, st.LeaseDeadline, st.LastAck
		}
		if st.SameNodeAs != o.addr {
			s.log.Info("node listed under another name too: standing by", "node_id", st.NodeID, "same_node_as", o.addr)
		}
		st.SameNodeAs, st.Epoch, st.Registered = o.addr, 0, false
		s.pending = nil
	})
	return o != nil
}

// takeOver ends standing by once no other session keeps the lease on the
// node: the session takes the epoch, data version and queued changes of
// the session acknowledged last on the node, to resume that lease. It
// reports whether it took over.
func (s *session) takeOver() bool {
	took := false
	s.update(func(st *NodeState) {
		r := s.r
		if o := r.sameNodeLocked(s); o != nil {
			st.SameNodeAs = o.addr
			s.pending = nil
			return
		}
		took = true
		st.SameNodeAs = ""
		var from *session
		for _, o := range r.sessions {
			if o != s && o.nodeKey == s.nodeKey && o.st.Epoch != 0 && (from == nil || o.st.LastAck.After(from.st.LastAck)) {
				from = o
			}
		}
		if from != nil {
			st.Epoch, st.DataVersion, st.LeaseDeadline, st.LastAck = from.st.Epoch, from.st.DataVersion, from.st.LeaseDeadline, from.st.LastAck
			s.pending = maps.Clone(from.pending)
		}
		s.log.Info("taking the lease over from a session to the same node", "node_id", st.NodeID, "epoch", st.Epoch)
	})
	return took
}

// standBy keeps a standing-by session's connection: it pings the node
// every probe interval (heartbeat interval without probing), which also
// notices the name moving to another node. It returns true once the
// session took the lease over (takeOver), false when the connection must
// be replaced or the session stops.
func (s *session) standBy(conn *client.Conn) bool {
	iv := s.r.cfg.ProbeInterval
	if iv <= 0 {
		iv = s.r.HeartbeatInterval()
	}
	next, fails := time.Now().Add(iv), 0
	for {
		if s.takeOver() {
			return true
		}
		if !s.idle(conn, time.Until(next)) {
			return false
		}
		if time.Now().Before(next) {
			continue // woken: the session it stands by for may be gone
		}
		err := s.probe(conn)
		next = time.Now().Add(iv)
		switch {
		case err == nil:
			fails = 0
		case s.runCtx.Err() != nil:
			return false
		default:
			if fails++; fails >= maxTransportFailures || isDone(conn.Done()) {
				return false
			}
		}
	}
}
