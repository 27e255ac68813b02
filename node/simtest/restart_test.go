package simtest

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire/broker"
)

// restartRun is what one node crash and restart measured.
type restartRun struct {
	Down            time.Duration
	Loss            float64
	Back            int             // brokers registered with the restarted node
	First, Median   time.Duration   // re-registration delays after the restart:
	Last            time.Duration   // the first, the median and the last
	AtWarmUpEnd     int             // leases the restarted node held when its warm-up ended
	Delays          []time.Duration // sorted
	OthersDips      int             // checks where node 1 or 2 held fewer than every lease
	Refreshes       int
	RefreshErrs     int
	Reads, ReadErrs int
	Short           int
	Failovers       uint64
}

// TestNodeCrashAndRestart crashes node 0 of 3 (its socket closes, nothing
// it sends escapes, its route tables are lost) while 20 brokers and 3
// route clients run at the default timings, and restarts it on the same
// address and data directory after a quick restart (2 s: every connection
// still up), a short outage (10 s, less than a heartbeat interval and the
// QUIC idle timeout) and a long one (3 min, past the lease threshold).
// Meanwhile the other nodes keep every lease, and the clients fail over
// and read every route in full. The restarted node gets every broker back
// within about one probe interval (5 s); how fast is measured and bounded.
//
// A broker whose connection is still up learns of the restart when it
// next sends the node a packet big enough to draw a stateless reset (the
// node keeps its reset key): its next probe, at most a probe interval
// away, which is padded for that (quic-go answers no packet of 42 bytes or
// less with a reset, and an unpadded ping is 36). A broker whose
// connection has already timed out is redialling, and while probing is on
// its reconnect backoff is capped at the probe interval, so it too tries
// within one. Either way the bound is the probe interval, plus a dial and
// a registration (a few round trips); with loss, plus retransmissions.
func TestNodeCrashAndRestart(t *testing.T) {
	probe := broker.DefaultProbeInterval
	for _, tc := range []struct {
		down time.Duration
		loss float64
		// bound on the last re-registration after the restart
		within time.Duration
	}{
		{down: 2 * time.Second, within: probe + time.Second},
		{down: 10 * time.Second, within: probe + time.Second},
		{down: 3 * time.Minute, within: probe + time.Second},
		{down: 10 * time.Second, loss: 0.10, within: 2 * probe},
	} {
		t.Run(fmt.Sprintf("down=%s,loss=%.0f%%", tc.down, 100*tc.loss), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				res := runRestart(t, tc.down, tc.loss, 3)
				if res.Last > tc.within {
					t.Errorf("the last broker re-registered %s after the restart, want within %s", res.Last, tc.within)
				}
			})
		})
	}
}

func runRestart(t *testing.T, down time.Duration, loss float64, seed uint64) restartRun {
	const nBrokers = 20
	// Client 0 asks one node at a time, node 0 first, and keeps asking the
	// node that answered last: it is certain to be reading from node 0
	// when it crashes, so it must fail over. The others ask two nodes
	// (the default), which may or may not include node 0.
	s := newSim(t, simConfig{Nodes: 3, Brokers: nBrokers, Clients: 3, Loss: loss, Seed: seed, FirstClientFanout: 1})
	s.waitSynced(2 * time.Minute)
	rd := s.startReaders(s.clients, 5*time.Second, func(i int) []string {
		return []string{sharedTopic, brokerTopic(i)}
	})
	time.Sleep(45 * time.Second) // past the sync: heartbeats and probes spread out

	res := restartRun{Down: down, Loss: loss}
	victim, others := s.nodes[0], s.nodes[1:]
	checkOthers := func() {
		for _, sn := range others {
			if n := sn.leases(); n != nBrokers {
				res.OthersDips++
				t.Errorf("node %d holds %d leases, want %d", sn.idx, n, nBrokers)
			}
			if n := sn.routeBrokers(sharedTopic); n != nBrokers {
				t.Errorf("node %d's route of %s names %d brokers, want %d", sn.idx, sharedTopic, n, nBrokers)
			}
		}
	}
	kept := s.snapshotLeases()
	victim.crash()
	for range int(down / time.Second) {
		time.Sleep(time.Second)
		checkOthers()
	}
	victim.restart()
	restartAt := time.Now()
	warmUpEnd := restartAt.Add(node.DefaultHeartbeatInterval) // WarmUp defaults to it
	measured := false
	for i := 0; i < 300 && victim.leases() < nBrokers; i++ {
		time.Sleep(time.Second)
		checkOthers()
		if !measured && !time.Now().Before(warmUpEnd) {
			res.AtWarmUpEnd, measured = victim.leases(), true
		}
	}
	time.Sleep(15 * time.Second) // the clients read a few more rounds
	checkOthers()
	rd.stop()

	first := make(map[string]time.Time)
	for _, r := range s.ev.registeredOn(victim.idx, restartAt) {
		if _, ok := first[r.Addr]; !ok {
			first[r.Addr] = r.At
		}
	}
	res.Back = len(first)
	for _, at := range first {
		res.Delays = append(res.Delays, at.Sub(restartAt))
	}
	slices.Sort(res.Delays)
	if n := len(res.Delays); n > 0 {
		res.First, res.Median, res.Last = res.Delays[0], res.Delays[n/2], res.Delays[n-1]
	}
	if !measured { // everyone was back before the warm-up ended
		res.AtWarmUpEnd = victim.leases()
	}
	if res.Back != nBrokers {
		t.Errorf("%d of %d brokers registered with the restarted node", res.Back, nBrokers)
	}
	// The other nodes kept every lease: same epochs, no registration again
	// (counters, not log records); nothing expired anywhere.
	for _, l := range s.leasesLost(kept, others...) {
		t.Errorf("while node 0 was down: %s", l)
	}
	for _, e := range s.ev.expired() {
		t.Errorf("unexpected expiry: node %d expired %s after %s of silence", e.Node, e.Addr, e.silence())
	}
	s.checkLoss()
	sum := rd.summary(nBrokers)
	res.Refreshes, res.RefreshErrs, res.Reads, res.ReadErrs, res.Short = sum.Refreshes, sum.RefreshErrs, sum.Reads, sum.ReadErrs, sum.Short
	res.Failovers = s.clientTotals().Failovers
	if sum.ReadErrs > 0 || sum.RefreshErrs > 0 || sum.Short > 0 {
		for _, r := range rd.all() {
			if r.Err != nil || (r.Topic == sharedTopic && r.Brokers < nBrokers) {
				t.Logf("client %d at %s (restart %s): %s: %d brokers, %v", r.Client, r.At.Format(time.TimeOnly), restartAt.Format(time.TimeOnly), r.Topic, r.Brokers, r.Err)
			}
		}
		t.Errorf("route clients: %d of %d refreshes and %d of %d reads failed, %d shared-topic reads short of brokers",
			sum.RefreshErrs, sum.Refreshes, sum.ReadErrs, sum.Reads, sum.Short)
	}
	if res.Failovers == 0 {
		t.Error("no route client failed over while node 0 was down")
	}
	t.Logf("down %s, loss %.0f%%: %d/%d brokers back after the restart: first %s, median %s, last %s; %d leases when the warm-up ended (%s after the restart)",
		down, 100*loss, res.Back, nBrokers, res.First, res.Median, res.Last, res.AtWarmUpEnd, node.DefaultHeartbeatInterval)
	t.Logf("re-registration delays: %v", res.Delays)
	t.Logf("clients: refreshes %d (errors %d), reads %d (errors %d, short %d), failovers %d; brokers: %+v",
		res.Refreshes, res.RefreshErrs, res.Reads, res.ReadErrs, res.Short, res.Failovers, s.brokerTotals())
	t.Logf("log records:%s", s.ev.summary())
	return res
}
