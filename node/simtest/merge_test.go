package simtest

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/routeclient"
)

// TestMergedReadsThroughPartition runs the three things a client reading
// from several nodes must survive, one after the other, at the default
// timings with 3 nodes and 20 brokers, and a route client whose FIRST node
// is the one that goes wrong:
//
//  1. Partition: node 0 is cut off from brokers 0-9 for 5 minutes, long
//     enough to expire them. The client must still see every live broker
//     group in every read, and never get "not found" for a topic a live
//     broker holds.
//  2. Broker death, during the partition: broker 15, which every node
//     reaches, is killed for real. Merged answers must lose it within the
//     lease threshold plus one expiry scan (plus the 1 s read step).
//  3. Restart: after the cut heals, node 0 crashes and restarts empty.
//     During its warm-up and after it, while brokers come back to it, the
//     client must get no "not found" and no short route.
//
// The requests the client sends are counted and bounded: each read round
// (a Refresh and the reads it makes fresh) costs at most one request per
// node asked, and failovers when a node does not answer.
func TestMergedReadsThroughPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const nBrokers, nCut, dead = 20, 10, 15
		s := newSim(t, simConfig{Nodes: 3, Brokers: nBrokers, Seed: 11})
		s.waitSynced(2 * time.Minute)
		isolated := s.nodes[0]
		sc := s.startClientOf(0, s.nodeAddrs(), clientRefresh) // node 0 first
		s.clients = append(s.clients, sc)
		c := sc.c
		// A second client watches the shared topic and the cut-off
		// brokers' topics, node 0 first too.
		wc := s.startClientOf(1, s.nodeAddrs(), clientRefresh)
		s.clients = append(s.clients, wc)
		watched := []string{sharedTopic}
		for i := range nCut {
			watched = append(watched, brokerTopic(i))
		}
		wctx, wcancel := context.WithCancel(context.Background())
		updates, err := wc.c.Watch(wctx, watched...)
		if err != nil {
			t.Fatal(err)
		}
		type seen struct {
			at time.Time
			u  routeclient.Update
		}
		var wmu sync.Mutex
		var pushed []seen
		watchDone := make(chan struct{})
		go func() {
			defer close(watchDone)
			for u := range updates {
				wmu.Lock()
				pushed = append(pushed, seen{time.Now(), u})
				wmu.Unlock()
			}
		}()

		var topics []string
		for i := range nBrokers {
			topics = append(topics, brokerTopic(i))
		}
		live := make(map[int]bool)
		for i := range nBrokers {
			live[i] = true
		}
		var falseNotFound, short, errs, rounds int
		// round refreshes every cached route and reads every topic, as a
		// producer would, and checks each answer against the live set.
		round := func(phase string) int {
			rounds++
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.Refresh(ctx); err != nil {
				errs++
				t.Errorf("%s: refresh: %v", phase, err)
			}
			route, _, err := c.Route(ctx, sharedTopic)
			if err != nil {
				errs++
				t.Errorf("%s: route of %s: %v", phase, sharedTopic, err)
			}
			liveCount := 0
			for i := range nBrokers {
				if live[i] {
					liveCount++
				}
			}
			if err == nil && len(route.Brokers) < liveCount {
				short++
				t.Errorf("%s at %s: route of %s names %d broker groups, %d are live", phase, time.Now().Format(time.TimeOnly), sharedTopic, len(route.Brokers), liveCount)
			}
			for i, topic := range topics {
				_, _, err := c.Route(ctx, topic)
				switch {
				case err == nil || !live[i]:
				case errors.Is(err, wire.ErrNotFound):
					falseNotFound++
					t.Errorf("%s at %s: %s (broker %d is live): %v", phase, time.Now().Format(time.TimeOnly), topic, i, err)
				default:
					errs++
					t.Errorf("%s: %s: %v", phase, topic, err)
				}
			}
			return len(route.Brokers)
		}
		for range 6 {
			round("before")
			time.Sleep(10 * time.Second)
		}

		// 1. Partition.
		var cut []netip.Addr
		for _, b := range s.brokers[:nCut] {
			cut = append(cut, b.ip)
		}
		s.net.setCut(isolated.ap.Addr(), cut, true)
		for range 18 { // 3 minutes: past the threshold and a scan
			round("partition")
			time.Sleep(10 * time.Second)
		}
		if n := isolated.leases(); n != nBrokers-nCut {
			t.Errorf("the isolated node holds %d leases, want %d: the partition did not bite", n, nBrokers-nCut)
		}

		// 2. Broker death, still partitioned.
		threshold, scan := node.DefaultExpiryThreshold, node.DefaultScanInterval
		// Its lease runs from the last heartbeat any node got.
		// Nodes got their last heartbeats at different times (a broker's
		// sessions are not in step): the first node may drop it up to that
		// spread earlier.
		var firstBeat, lastBeat time.Time
		for _, sn := range s.nodes {
			l, ok := sn.n.Registry().Lease(clusterName, s.brokers[dead].addr)
			if !ok {
				t.Fatalf("node %d holds no lease of broker %d before it dies", sn.idx, dead)
			}
			if l.LastHeartbeat.After(lastBeat) {
				lastBeat = l.LastHeartbeat
			}
			if firstBeat.IsZero() || l.LastHeartbeat.Before(firstBeat) {
				firstBeat = l.LastHeartbeat
			}
		}
		s.brokers[dead].kill()
		live[dead] = false // from now on its absence is no error
		killedAt := time.Now()
		var gone, nodesGone time.Duration
		for gone == 0 && time.Since(killedAt) < 5*time.Minute {
			time.Sleep(time.Second)
			if nodesGone == 0 && !slices.ContainsFunc(s.nodes, func(sn *simNode) bool { return sn.hasLease(s.brokers[dead]) }) {
				nodesGone = time.Since(lastBeat)
			}
			asked := time.Now() // the answer is the nodes' state when asked
			if round("death") < nBrokers {
				gone = asked.Sub(lastBeat)
			}
		}
		t.Logf("the killed broker: last heartbeats %s apart on the nodes; its lease left the last node %s after the latest", lastBeat.Sub(firstBeat), nodesGone)
		if gone == 0 || gone > threshold+scan+time.Second {
			t.Errorf("the killed broker left merged answers %s after its last heartbeat, want within %s (threshold + scan + the read step)", gone, threshold+scan+time.Second)
		}
		if early := threshold - lastBeat.Sub(firstBeat); gone != 0 && gone < early {
			t.Errorf("the killed broker left merged answers %s after its last heartbeat, before its threshold %s (less the nodes' spread)", gone, threshold)
		}
		s.net.setCut(isolated.ap.Addr(), cut, false)
		for i := 0; i < 60 && isolated.leases() < nBrokers-1; i++ {
			round("healing")
			time.Sleep(time.Second)
		}

		// 3. Node 0 restarts and warms up.
		isolated.crash()
		time.Sleep(5 * time.Second)
		isolated.restart()
		for range 12 { // its warm-up (30 s) and as long again
			round("restart")
			time.Sleep(5 * time.Second)
		}

		wcancel()
		<-watchDone
		// The watch: every update before the death names every group, no
		// watched topic is ever gone, and the last update of the shared
		// topic has lost the killed broker.
		var lastShared routeclient.Update
		for _, p := range pushed {
			switch {
			case p.u.Err != nil:
				t.Errorf("watch at %s: %v", p.at.Format(time.TimeOnly), p.u.Err)
			case p.u.Gone:
				t.Errorf("watch at %s: %s gone, its broker is live", p.at.Format(time.TimeOnly), p.u.Topic)
			case p.u.Topic == sharedTopic && p.at.Before(killedAt) && len(p.u.Route.Brokers) != nBrokers:
				t.Errorf("watch at %s: %s names %d groups before any broker died", p.at.Format(time.TimeOnly), sharedTopic, len(p.u.Route.Brokers))
			case p.u.Topic == sharedTopic:
				lastShared = p.u
			}
		}
		if len(lastShared.Route.Brokers) != nBrokers-1 {
			t.Errorf("the watch's last route of %s names %d groups, want %d", sharedTopic, len(lastShared.Route.Brokers), nBrokers-1)
		}
		ws := wc.c.Stats()
		t.Logf("watching client: %d updates, %d events on %d streams", len(pushed), ws.Events, ws.WatchStreams)

		st := c.Stats()
		requests := st.Queries + st.Refreshes
		t.Logf("merged reads, node 0 first in the client's list: %d rounds, %d false not-found, %d short routes, %d other errors", rounds, falseNotFound, short, errs)
		t.Logf("killed broker gone from merged answers %s after its last heartbeat, %s after it was killed (threshold %s + scan %s)", gone, gone-killedAt.Sub(lastBeat), threshold, scan)
		t.Logf("client requests: %d (%d refreshes, %d lookups, %d failovers): %.1f per round; stats %+v",
			requests, st.Refreshes, st.Queries, st.Failovers, float64(requests)/float64(rounds), st)
		// Every round is one Refresh and reads served from the cache, but
		// once the killed broker's topic is gone it is looked up (and not
		// found) every round: two queries of Fanout nodes, and a failover
		// each while a node is down.
		if perRound, bound := float64(requests)/float64(rounds), 2*(routeclient.DefaultFanout+1); perRound > float64(bound) {
			t.Errorf("%.1f requests per read round, want at most %d", perRound, bound)
		}
	})
}
