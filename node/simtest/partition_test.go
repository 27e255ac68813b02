package simtest

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire"
)

// TestPartitionedNode cuts node 0 of 3 off from half of 20 brokers (every
// packet between them dropped, both ways) for 4 minutes at the default
// timings, then heals the cut. Nodes 1 and 2 keep every lease and serve
// every route throughout, and a client reading only from them sees every
// broker. Node 0 expires exactly the cut-off brokers, each between the
// threshold and the threshold plus one scan interval after the last
// heartbeat it got, and nothing else; after the cut heals it has them all
// back within the brokers' longest reconnect backoff plus a dial.
//
// Clients that read from every node are measured, not asserted: node 0 is
// reachable for them, and once it has expired the cut-off brokers it
// answers with routes that lack them, and "not found" for topics only they
// hold. A route client takes either as the answer (it fails over only on
// errors, timeouts and warming-up answers), so a client whose preferred
// node is the partitioned one loses those routes until the cut heals.
func TestPartitionedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const nBrokers, nCut = 20, 10
		const partition = 4 * time.Minute
		s := newSim(t, simConfig{Nodes: 3, Brokers: nBrokers, Clients: 3, Seed: 5})
		s.waitSynced(2 * time.Minute)
		isolated, others := s.nodes[0], s.nodes[1:]
		pinned := s.startClientOf(3, []string{others[0].ap.String(), others[1].ap.String()}, clientRefresh)
		s.clients = append(s.clients, pinned)
		topics := func(i int) []string { return []string{sharedTopic, brokerTopic(i % 3)} } // topics of cut-off brokers
		all := s.startReaders(s.clients[:3], 10*time.Second, topics)
		safe := s.startReaders([]*simClient{pinned}, 10*time.Second, topics)
		time.Sleep(75 * time.Second)

		var cut []netip.Addr
		cutAddrs := make(map[string]bool)
		for _, b := range s.brokers[:nCut] {
			cut = append(cut, b.ip)
			cutAddrs[b.addr] = true
		}
		checkOthers := func() {
			for _, sn := range others {
				if n := sn.leases(); n != nBrokers {
					t.Errorf("node %d holds %d leases during the partition, want %d", sn.idx, n, nBrokers)
				}
				if n := sn.routeBrokers(sharedTopic); n != nBrokers {
					t.Errorf("node %d's route of %s names %d brokers, want %d", sn.idx, sharedTopic, n, nBrokers)
				}
			}
		}
		cutAt := time.Now()
		s.net.setCut(isolated.ap.Addr(), cut, true)
		minLeases := nBrokers
		for range int(partition / time.Second) {
			time.Sleep(time.Second)
			checkOthers()
			minLeases = min(minLeases, isolated.leases())
		}
		if minLeases != nBrokers-nCut {
			t.Errorf("the isolated node held at least %d leases during the partition, want %d", minLeases, nBrokers-nCut)
		}
		s.net.setCut(isolated.ap.Addr(), cut, false)
		healAt := time.Now()
		for i := 0; i < 180 && isolated.leases() < nBrokers; i++ {
			time.Sleep(time.Second)
			checkOthers()
		}
		time.Sleep(30 * time.Second)
		all.stop()
		safe.stop()

		// Expiries: the cut-off brokers on the isolated node, nothing else.
		threshold, scan := node.DefaultExpiryThreshold, node.DefaultScanInterval
		exp := s.ev.expired()
		seen := make(map[string]bool)
		var silences []time.Duration
		for _, e := range exp {
			switch {
			case e.Node != isolated.idx:
				t.Errorf("node %d expired %s, a broker it could reach", e.Node, e.Addr)
			case !cutAddrs[e.Addr]:
				t.Errorf("the isolated node expired %s, a broker it could reach", e.Addr)
			case seen[e.Addr]:
				t.Errorf("the isolated node expired %s twice", e.Addr)
			case e.silence() < threshold || e.silence() > threshold+scan:
				t.Errorf("the isolated node expired %s %s after its last heartbeat, want %s to %s", e.Addr, e.silence(), threshold, threshold+scan)
			}
			seen[e.Addr] = true
			silences = append(silences, e.silence())
		}
		if len(seen) != nCut {
			t.Errorf("the isolated node expired %d of the %d cut-off brokers", len(seen), nCut)
		}
		slices.Sort(silences)
		if len(silences) > 0 {
			t.Logf("expiries on the isolated node: %d, %s to %s after the last heartbeat (%s to %s after the cut)",
				len(exp), silences[0], silences[len(silences)-1], exp[0].At.Sub(cutAt), exp[len(exp)-1].At.Sub(cutAt))
		}

		// Healing: every cut-off broker registers again.
		var back []time.Duration
		for _, r := range s.ev.registeredOn(isolated.idx, healAt) {
			back = append(back, r.At.Sub(healAt))
		}
		slices.Sort(back)
		if isolated.leases() != nBrokers || len(back) != nCut {
			t.Errorf("after healing: the isolated node holds %d leases (%d registered again), want %d", isolated.leases(), len(back), nBrokers)
		}
		// Each was retrying its dial with backoff: the longest wait is
		// Backoff.Max (30 s; half the probe interval while probing), plus
		// a dial.
		if within := 35 * time.Second; len(back) > 0 && back[len(back)-1] > within {
			t.Errorf("the last cut-off broker registered again %s after the cut healed, want within %s", back[len(back)-1], within)
		}
		t.Logf("registered again after healing: %v", back)

		// The client that reads only from nodes 1 and 2 sees every route
		// in full throughout.
		for _, r := range safe.all() {
			switch {
			case r.Err != nil:
				t.Errorf("pinned client at %s: %s: %v", r.At.Format(time.TimeOnly), r.Topic, r.Err)
			case r.Topic == sharedTopic && r.Brokers != nBrokers:
				t.Errorf("pinned client at %s: route of %s names %d brokers, want %d", r.At.Format(time.TimeOnly), r.Topic, r.Brokers, nBrokers)
			}
		}
		sum := safe.summary(nBrokers)
		t.Logf("client reading from nodes 1 and 2: refreshes %d (errors %d), reads %d (errors %d, short %d)",
			sum.Refreshes, sum.RefreshErrs, sum.Reads, sum.ReadErrs, sum.Short)

		// Clients reading from every node: measured.
		var notFound, short, otherErrs int
		var firstBad, lastBad time.Time
		for _, r := range all.all() {
			bad := true
			switch {
			case r.Topic == "":
				bad = false
				if r.Err != nil {
					otherErrs++
				}
			case errors.Is(r.Err, wire.ErrNotFound):
				notFound++
			case r.Err != nil:
				otherErrs++
				t.Errorf("client %d at %s: %s: %v", r.Client, r.At.Format(time.TimeOnly), r.Topic, r.Err)
			case r.Topic == sharedTopic && r.Brokers != nBrokers:
				short++
			default:
				bad = false
			}
			if bad {
				if firstBad.IsZero() {
					firstBad = r.At
				}
				lastBad = r.At
			}
		}
		sum = all.summary(nBrokers)
		t.Logf("clients reading from every node: refreshes %d (errors %d), reads %d: %d not found, %d shared routes short of brokers, %d other errors",
			sum.Refreshes, sum.RefreshErrs, sum.Reads, notFound, short, otherErrs)
		if !firstBad.IsZero() {
			t.Logf("  wrong answers from %s to %s after the cut (healed at %s)", firstBad.Sub(cutAt), lastBad.Sub(cutAt), healAt.Sub(cutAt))
		}
		t.Logf("log records:%s", s.ev.summary())
	})
}
