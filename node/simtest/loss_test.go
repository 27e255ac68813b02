package simtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// lossRun is what one run of the loss scenario measured.
type lossRun struct {
	Loss            float64
	Expiries        int    // expiries the nodes logged: all false here
	LeaseDips       int    // 10 s checks where a node held fewer than every lease
	LeasesLost      int    // leases whose epoch changed, and registrations again, after the sync
	Resumes         uint64 // reconnects that kept the lease with a heartbeat
	Heartbeats      uint64
	HeartbeatFails  int
	RegisterAgain   int // full re-registrations after the first one
	Dials           uint64
	Reads, ReadErrs int
	ShortRoutes     int // shared-topic reads missing a broker
	Refreshes       int
	RefreshErrs     int
	Net             netStats
}

func (r lossRun) String() string {
	return fmt.Sprintf("loss %.0f%%: false expiries %d, lease dips %d, leases lost %d, heartbeats acked %d, heartbeat attempts failed %d (%.2f%% success), "+
		"re-registrations %d, resumed leases %d, dials %d, route reads %d (errors %d, short %d), refreshes %d (errors %d), packets %d (lost %d)",
		100*r.Loss, r.Expiries, r.LeaseDips, r.LeasesLost, r.Heartbeats, r.HeartbeatFails,
		pct(r.Heartbeats, r.Heartbeats+uint64(r.HeartbeatFails)), r.RegisterAgain, r.Resumes, r.Dials,
		r.Reads, r.ReadErrs, r.ShortRoutes, r.Refreshes, r.RefreshErrs, r.Net.Sent, r.Net.Lost)
}

// runLoss runs 3 nodes and 20 brokers at the default timings (heartbeat
// 30 s, expiry 120 s, scan 5 s) and 3 route clients on a network that
// loses loss of the packets each way with a 40 ms round trip, for d of
// virtual time. Every 10 s it checks that every node holds every lease.
// With strict false, violations are only logged (for the sweep).
func runLoss(t *testing.T, loss float64, d time.Duration, seed uint64, strict bool) lossRun {
	t.Helper()
	return runLossModel(t, simConfig{Loss: loss, Seed: seed}, d, strict)
}

// runLossModel is runLoss on the network cfg describes (Loss, Drop, Seed;
// the deployment's size is runLoss's).
func runLossModel(t *testing.T, cfg simConfig, d time.Duration, strict bool) lossRun {
	t.Helper()
	loss := cfg.Loss
	fail := t.Errorf
	if !strict {
		fail = t.Logf
	}
	const nNodes, nBrokers, nClients = 3, 20, 3
	cfg.Nodes, cfg.Brokers, cfg.Clients = nNodes, nBrokers, nClients
	s := newSim(t, cfg)
	if strict {
		s.waitSynced(5 * time.Minute)
	} else {
		// At very high loss connections flap, and every registrar is
		// rarely registered with every node at one instant: give them a
		// few minutes, then count.
		for i := 0; i < 300 && !allLeased(s, nBrokers); i++ {
			time.Sleep(time.Second)
		}
		if !allLeased(s, nBrokers) {
			t.Logf("loss %.0f%%: not every node holds every lease after 5 minutes", 100*loss)
		}
	}
	synced, regsAtSync := s.snapshotLeases(), s.brokerTotals().Registrations
	rd := s.startReaders(s.clients, 10*time.Second, func(i int) []string {
		return []string{sharedTopic, brokerTopic(i)}
	})
	res := lossRun{Loss: loss}
	for range int(d / (10 * time.Second)) {
		time.Sleep(10 * time.Second)
		for _, sn := range s.nodes {
			if n := sn.leases(); n != nBrokers {
				res.LeaseDips++
				fail("%s after sync: node %d holds %d leases, want %d", time.Since(sn.started).Round(time.Second), sn.idx, n, nBrokers)
			}
		}
	}
	rd.stop()

	// Lost leases, by counters rather than log records: a lease lost
	// changes its epoch on the node and costs its registrar one more full
	// registration. The expiry log only explains what is found.
	lost := s.leasesLost(synced)
	res.LeasesLost = len(lost)
	for _, l := range lost {
		fail("after every broker had registered: %s", l)
	}
	res.Expiries = len(s.ev.expired())
	for _, e := range s.ev.expired() {
		t.Logf("node %d logged the expiry of %s at %s, %s after its last heartbeat", e.Node, e.Addr, e.At.Format(time.TimeOnly), e.silence())
	}
	bt := s.brokerTotals()
	res.Heartbeats, res.Dials, res.Resumes = bt.Heartbeats, bt.Dials, bt.Resumes
	res.RegisterAgain = int(bt.Registrations - regsAtSync)
	res.HeartbeatFails = s.ev.count("broker: request to node failed: retrying [heartbeat]")
	for _, r := range rd.all() {
		switch {
		case r.Topic == "":
			res.Refreshes++
			if r.Err != nil {
				res.RefreshErrs++
				if cfg.ReadFailShare > 0 {
					t.Logf("client %d: refresh at %s: %v", r.Client, r.At.Format(time.TimeOnly), r.Err)
				} else {
					fail("client %d: refresh at %s: %v", r.Client, r.At.Format(time.TimeOnly), r.Err)
				}
			}
		default:
			res.Reads++
			switch {
			case r.Err != nil:
				res.ReadErrs++
				if cfg.ReadFailShare > 0 {
					t.Logf("client %d: route of %s at %s: %v", r.Client, r.Topic, r.At.Format(time.TimeOnly), r.Err)
				} else {
					fail("client %d: route of %s at %s: %v", r.Client, r.Topic, r.At.Format(time.TimeOnly), r.Err)
				}
			case r.Topic == sharedTopic && r.Brokers != nBrokers:
				res.ShortRoutes++
				fail("client %d: route of %s at %s names %d brokers, want %d", r.Client, r.Topic, r.At.Format(time.TimeOnly), r.Brokers, nBrokers)
			}
		}
	}
	if allowed := int(cfg.ReadFailShare * float64(res.Refreshes)); res.RefreshErrs > allowed && cfg.ReadFailShare > 0 {
		fail("%d of %d refreshes failed, more than %d", res.RefreshErrs, res.Refreshes, allowed)
	}
	if allowed := int(cfg.ReadFailShare * float64(res.Reads)); res.ReadErrs > allowed && cfg.ReadFailShare > 0 {
		fail("%d of %d route reads failed, more than %d", res.ReadErrs, res.Reads, allowed)
	}
	if strict {
		res.Net = s.checkLoss()
	} else {
		res.Net = s.net.snapshot()
	}
	t.Logf("%v", res)
	t.Logf("route clients: %+v", s.clientTotals())
	t.Logf("log records:%s", s.ev.summary())
	return res
}

func allLeased(s *sim, n int) bool {
	for _, sn := range s.nodes {
		if sn.leases() != n {
			return false
		}
	}
	return true
}

// TestLossyNetworkDefaults is issue 4's main scenario: at the default
// timings, 10% and 30% packet loss both ways on every link for 30 virtual
// minutes cost no broker its lease on any node (no lease ever missing at a
// 10 s check, every lease under the epoch it had at the sync, no registrar
// registering again; the network really dropped that share of packets),
// and every refresh (a
// poll of the nodes in turn, 3 s each, with failover) and every route read
// succeeds with every broker in it.
//
// Why this holds with a wide margin: a heartbeat request gets 5 s, in
// which QUIC retransmits a lost request or response several times, so an
// attempt fails rarely (measured: none of ~3,750 at 10%, about 1 in 1,000
// at 30%), and a failed attempt is retried after a short backoff, so a
// lease (120 s) sees at least 4 scheduled heartbeats plus retries. Even
// counting the 4 scheduled ones alone as independent, a lease is lost with
// probability about f^4, 1e-12 at 30%. The defaults start to break
// between 60% and 65% loss (see TestLossSweep): there, half the attempts
// or more fail, two failures in a row replace the connection, and the new
// handshake (several packets each way, all needed) often fails its 5 s
// dial, so a broker spends its lease in dial backoff.
func TestLossyNetworkDefaults(t *testing.T) {
	d := 30 * time.Minute
	if testing.Short() {
		d = 10 * time.Minute
	}
	for _, loss := range []float64{0.10, 0.30} {
		t.Run(fmt.Sprintf("loss=%.0f%%", 100*loss), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				res := runLoss(t, loss, d, uint64(100*loss), true)
				if res.Heartbeats == 0 {
					t.Error("no heartbeat was acknowledged")
				}
			})
		})
	}
}

// TestLossSweep looks for the loss rate at which the default timings
// start to cost leases. It is slow, so it runs only with
// EDGEREG_SIM_SWEEP set to a comma-separated list of loss percentages,
// e.g. EDGEREG_SIM_SWEEP=40,50,60,70; it reports and asserts nothing.
func TestLossSweep(t *testing.T) {
	spec := os.Getenv("EDGEREG_SIM_SWEEP")
	if spec == "" {
		t.Skip("set EDGEREG_SIM_SWEEP=40,50,60 to run")
	}
	var results []string
	for _, f := range strings.Split(spec, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("loss=%d%%", p), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				res := runLoss(t, float64(p)/100, 30*time.Minute, uint64(p), false)
				results = append(results, res.String())
			})
		})
	}
	for _, r := range results {
		t.Log(r)
	}
}
