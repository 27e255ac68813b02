package node_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/pki"
)

// TestQuicoutLeaseHeartbeats is PROTOCOL.md 7.8's LeaseInfo.Heartbeats:
// heartbeat and update-topics frames since the lease began, kept by a
// repeated register, from 0 again once unregistered; and ThresholdMs is
// DeadlineMs - LastHeartbeatMs.
func TestQuicoutLeaseHeartbeats(t *testing.T) {
	o := newOutside(t, nil)
	bs := open(t, o.dial(pki.RoleBroker, "beats-b"))
	ops := open(t, o.dial(pki.RoleOperator, "beats-op"))
	reg := registerBody("bc", "bg", 0, "10.50.0.1:10911", 1, "BT")
	reg[10] = uint64(5000)
	beats := func(what string, want uint64) {
		t.Helper()
		l := asList(ops.ok(tLeases, nil).m(t)[1])
		if !check(t, len(l) == 1, "8.15: %s: one lease, got %v", what, l) {
			return
		}
		m := asMap(t, l[0])
		check(t, asU(m[11]) == want, "7.8: %s: Heartbeats %d, want %d (%v)", what, asU(m[11]), want, m)
		check(t, asI(m[10]) == 5000 && asI(m[9])-asI(m[8]) == 5000, "7.8: %s: ThresholdMs is DeadlineMs - LastHeartbeatMs, got %v", what, m)
	}
	ep := asU(asMap(t, bs.ok(tRegister, reg).m(t)[1])[1])
	beats("after register", 0)
	hb := map[uint64]any{1: "bc", 2: "10.50.0.1:10911", 3: ep, 4: map[uint64]any{1: uint64(1), 3: uint64(1)}}
	bs.ok(tHeartbeat, hb)
	bs.ok(tHeartbeat, hb)
	beats("after 2 heartbeats", 2)
	bs.ok(tUpdateTopics, map[uint64]any{1: "bc", 2: "10.50.0.1:10911", 3: ep, 4: map[uint64]any{1: uint64(1), 3: uint64(2)}, 5: []any{topicCfg("BT2")}})
	beats("after an update-topics", 3)
	reg[8] = map[uint64]any{1: uint64(1), 3: uint64(3)}
	ep = asU(asMap(t, bs.ok(tRegister, reg).m(t)[1])[1])
	beats("after a repeated register", 3)
	bs.ok(tUnregister, map[uint64]any{1: "bc", 2: "10.50.0.1:10911", 3: ep})
	bs.ok(tRegister, reg)
	beats("registered again after an unregister", 0)
}

// TestQuicoutPeerResetsItsSendSide: a peer that resets its send side
// (RESET_STREAM) ends the stream (PROTOCOL.md 4.4): the node finishes its
// own side with a FIN, having answered at most the requests it had read
// (QUIC discards what the reset overtook: their outcome is unknown, 4.5).
func TestQuicoutPeerResetsItsSendSide(t *testing.T) {
	o := newOutside(t, nil)
	qc := o.dial(pki.RoleClient, "resets")
	for _, wait := range []bool{true, false} {
		rs := open(t, qc)
		rs.send(tPing, nil)
		if wait { // the answer is on its way before the reset
			f := rs.read()
			check(t, f.typ == tPing && !f.hasErr, "4: ping answered, got %v", f)
		}
		rs.s.CancelWrite(0x77)
		for {
			f, err := rs.next(10 * time.Second)
			if err != nil {
				check(t, errors.Is(err, io.EOF), "4.4: after the peer's reset the node finishes the stream, got %v", err)
				break
			}
			check(t, f.typ == tPing && f.id == 1 && !f.hasErr, "4.4: after a reset, only the answer to a request read before it, got %v", f)
		}
	}
}
