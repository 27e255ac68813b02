package simtest

import (
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// window is a span of virtual time.
type window struct{ from, to time.Time }

// blackouts drops every packet to or from host during each window, and
// every packet from host (only that way) while oneWay is set. A trigger
// opens a window of its length once the bytes sent by its sender to host
// pass after: mid-registration. Its state is guarded by the network's
// lock, except oneWay and dropped.
type blackouts struct {
	host     netip.Addr
	windows  []window
	triggers []trigger
	oneWay   atomic.Bool
	dropped  atomic.Uint64
}

type trigger struct {
	sender netip.Addr
	after  int
	length time.Duration
	sent   int
	fired  bool
}

func (b *blackouts) model(_ *rand.Rand, from, to netip.AddrPort, size int) bool {
	if from.Addr() != b.host && to.Addr() != b.host {
		return false
	}
	for i := range b.triggers {
		tr := &b.triggers[i]
		if tr.fired || from.Addr() != tr.sender {
			continue
		}
		if tr.sent += size; tr.sent > tr.after {
			tr.fired = true
			b.windows = append(b.windows, window{time.Now(), time.Now().Add(tr.length)})
		}
	}
	drop := b.oneWay.Load() && from.Addr() == b.host
	now := time.Now()
	for _, w := range b.windows {
		if !now.Before(w.from) && now.Before(w.to) {
			drop = true
		}
	}
	if drop {
		b.dropped.Add(1)
	}
	return drop
}

// TestBlackoutsMidRegistrationAndABlackholingNode: 3 nodes, 6 brokers of
// 2,000 topics each (registrations of about 60 KB, several round trips
// at 40 ms).
//
// First node 0 blacks out, both ways, for 3 s while broker 0's first
// registration is under way and for 5 s while broker 1's is: every broker
// still registers with every node, and each node holds one lease per
// broker under the epoch the broker last heard of (no second
// registration left behind).
//
// Then node 2 turns into a one-way black hole for 3 minutes, past the
// lease threshold: it still receives, but nothing it sends arrives, so
// the brokers' connections to it die after the handshake, and their
// redials never complete. Nodes 0 and 1 keep every lease under its epoch
// throughout, the brokers keep dialling node 2 at a bounded rate, and
// once it heals every broker is registered with it again and agrees with
// it on the epoch.
//
// Last node 1 restarts with an empty registry: refilled, under new epochs
// only, the others untouched.
func TestBlackoutsMidRegistrationAndABlackholingNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const nBrokers = 6
		b0 := &blackouts{host: nodeIP(0), triggers: []trigger{
			{sender: brokerIP(0), after: 20 << 10, length: 3 * time.Second},
			{sender: brokerIP(1), after: 40 << 10, length: 5 * time.Second},
		}}
		b2 := &blackouts{host: nodeIP(2)}
		s := newSim(t, simConfig{Nodes: 3, Brokers: nBrokers, Seed: 31, ExtraTopics: 2000,
			Drop: func(rng *rand.Rand, from, to netip.AddrPort, size int) bool {
				return b0.model(rng, from, to, size) || b2.model(rng, from, to, size)
			}})
		s.waitSynced(3 * time.Minute)
		for _, tr := range b0.triggers {
			if !tr.fired {
				t.Fatalf("the blackout on %s's registration never began: %d bytes sent", tr.sender, tr.sent)
			}
		}
		checkEpochs := func(when string) {
			for _, b := range s.brokers {
				for _, st := range b.r.Nodes() {
					for _, sn := range s.nodes {
						if sn.ap.String() != st.Addr {
							continue
						}
						l, ok := sn.n.Registry().Lease(clusterName, b.addr)
						if !ok || l.Epoch != st.Epoch {
							t.Errorf("%s: broker %d holds epoch %d on node %d, the node %v (held %v)", when, b.idx, st.Epoch, sn.idx, l.Epoch, ok)
						}
					}
				}
			}
			for _, sn := range s.nodes {
				if n := sn.leases(); n != nBrokers {
					t.Errorf("%s: node %d holds %d leases, want %d", when, sn.idx, n, nBrokers)
				}
			}
		}
		checkEpochs("after the blackouts")
		t.Logf("the blackouts of node 0 dropped %d packets; registrations %d", b0.dropped.Load(), s.brokerTotals().Registrations)

		time.Sleep(40 * time.Second)
		kept := s.snapshotLeases()
		isNode2 := func(a netip.Addr) bool { return isBroker(a) }
		dials0 := s.net.dialsTo(nodeIP(2), isNode2)
		b2.oneWay.Store(true)
		const hole = 3 * time.Minute
		for range int(hole / (10 * time.Second)) {
			time.Sleep(10 * time.Second)
			for _, sn := range s.nodes[:2] {
				if n := sn.leases(); n != nBrokers {
					t.Errorf("node %d holds %d leases while node 2 black-holes, want %d", sn.idx, n, nBrokers)
				}
			}
		}
		dials := s.net.dialsTo(nodeIP(2), isNode2) - dials0
		t.Logf("dials to node 2 during its %s as a black hole: %d by %d brokers; node 2 holds %d leases", hole, dials, nBrokers, s.nodes[2].leases())
		if perBroker := dials / nBrokers; perBroker > int(hole/(5*time.Second))+2 {
			t.Errorf("each broker dialled the black hole %d times in %s, more than one per dial timeout (5 s)", perBroker, hole)
		}
		b2.oneWay.Store(false)
		healed := time.Now()
		s.waitSynced(time.Minute)
		t.Logf("every broker registered with node 2 again %s after it healed", time.Since(healed))
		if lost := s.leasesLost(kept, s.nodes[:2]...); len(lost) > 0 {
			t.Errorf("leases lost on nodes 0 and 1 while node 2 black-holed: %v", lost)
		}
		checkEpochs("after node 2 healed")

		// 3. Node 1 crashes and restarts 10 s later with an empty
		// registry: the brokers refill it, each with a new epoch (seeded
		// from the clock: none repeats one of before the crash), and
		// nodes 0 and 2 keep theirs.
		kept = s.snapshotLeases()
		old := make(map[uint64]bool)
		for _, e := range kept.epochs[1] {
			old[e] = true
		}
		s.nodes[1].crash()
		time.Sleep(10 * time.Second)
		s.nodes[1].restart()
		restarted := time.Now()
		for i := 0; i < 120 && s.nodes[1].leases() < nBrokers; i++ {
			time.Sleep(time.Second)
		}
		s.waitSynced(time.Minute)
		t.Logf("node 1 refilled %s after its restart", time.Since(restarted))
		checkEpochs("after node 1 restarted")
		for _, l := range s.nodes[1].n.Registry().Leases() {
			if old[l.Epoch] {
				t.Errorf("the restarted node gave %s epoch %d again", l.Addr, l.Epoch)
			}
		}
		if lost := s.leasesLost(kept, s.nodes[0], s.nodes[2]); len(lost) > 0 {
			t.Errorf("leases lost on nodes 0 and 2 while node 1 restarted: %v", lost)
		}
	})
}
