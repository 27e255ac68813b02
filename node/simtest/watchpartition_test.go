package simtest

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// writeQueuesOf returns the write queues broker group name has in r, 0
// when it is not there.
func writeQueuesOf(r wire.Route, name string) uint32 {
	for _, q := range r.Queues {
		if q.BrokerName == name {
			return q.WriteQueues
		}
	}
	return 0
}

// seen is one update a watch delivered, reduced to what the test checks.
type seen struct {
	At      time.Time
	Version uint64
	Queues  uint32 // the changing broker's write queues
	Brokers int
}

// TestWatchAcrossPartitionsSeesNoOlderData: 3 nodes, 4 brokers; one
// client watches the shared topic (over two nodes, the default fanout),
// another reads it every 2 s from nodes 0 and 1 only.
//
//  1. The watcher is cut off from nodes 0 and 1 (both its streams, or
//     one, break) for 90 s, and meanwhile broker 3 raises its write queues
//     of the shared topic from 4 to 16: the watch resumes on node 2 and
//     delivers the change, then after the heal nothing older.
//  2. Node 0 is cut off from broker 3 for 150 s (past the lease
//     threshold) and meanwhile broker 3 raises its queues to 32: node 0
//     keeps the old 16 until it expires the broker. Neither the watch nor
//     the reads ever go back to 16 after they saw 32 (each group's data
//     comes from the node that heard from it last), and neither loses
//     broker 3 (node 1 still has it).
//
// Throughout, the watch delivers each version once (no two updates in a
// row of one version), its queue counts only grow, and its last update
// is the route every node serves at the end.
func TestWatchAcrossPartitionsSeesNoOlderData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const nBrokers = 4
		s := newSim(t, simConfig{Nodes: 3, Brokers: nBrokers, Seed: 41})
		s.waitSynced(2 * time.Minute)
		changer := s.brokers[3]
		watcher := s.startClientOf(10, s.nodeAddrs(), clientRefresh)
		reader := s.startClientOf(11, []string{s.nodes[0].ap.String(), s.nodes[1].ap.String()}, clientRefresh)
		s.clients = append(s.clients, watcher, reader)

		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var got []seen
		ch, err := watcher.c.Watch(ctx, sharedTopic)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for u := range ch {
				mu.Lock()
				got = append(got, seen{time.Now(), u.Version, writeQueuesOf(u.Route, changer.name), len(u.Route.Brokers)})
				mu.Unlock()
			}
		})
		rd := s.startReaders([]*simClient{reader}, 2*time.Second, func(int) []string { return []string{sharedTopic} })
		var readQueues []uint32
		var readsMu sync.Mutex
		stopReads := make(chan struct{})
		wg.Go(func() { // the reader's view of broker 3, each 2 s
			for {
				select {
				case <-stopReads:
					return
				case <-time.After(2 * time.Second):
				}
				r, _, err := reader.c.Route(ctx, sharedTopic)
				if err == nil {
					readsMu.Lock()
					readQueues = append(readQueues, writeQueuesOf(r, changer.name))
					readsMu.Unlock()
				}
			}
		})
		time.Sleep(20 * time.Second)

		upsert := func(q uint32) {
			if err := changer.r.UpsertTopics(wire.TopicConfig{Name: sharedTopic, ReadQueues: q, WriteQueues: q, Perm: wire.PermRead | wire.PermWrite}); err != nil {
				t.Fatal(err)
			}
		}
		// 1. the watcher cut off from nodes 0 and 1
		s.net.setCut(clientIP(10), []netip.Addr{nodeIP(0), nodeIP(1)}, true)
		time.Sleep(10 * time.Second)
		upsert(16)
		time.Sleep(80 * time.Second)
		s.net.setCut(clientIP(10), []netip.Addr{nodeIP(0), nodeIP(1)}, false)
		time.Sleep(30 * time.Second)

		// 2. node 0 cut off from the changing broker
		s.net.setCut(nodeIP(0), []netip.Addr{changer.ip}, true)
		time.Sleep(10 * time.Second)
		upsert(32)
		time.Sleep(140 * time.Second)
		s.net.setCut(nodeIP(0), []netip.Addr{changer.ip}, false)
		s.waitSynced(time.Minute)
		time.Sleep(20 * time.Second)

		close(stopReads)
		rd.stop()
		cancel()
		wg.Wait()

		final, finalV, err := reader.c.Route(context.Background(), sharedTopic)
		if err != nil {
			t.Fatal(err)
		}
		for _, sn := range s.nodes {
			_, v, err := sn.n.Registry().RouteData(sharedTopic)
			if err != nil || v != finalV {
				t.Errorf("node %d serves version %d (%v), the reader %d", sn.idx, v, err, finalV)
			}
		}
		if q := writeQueuesOf(final, changer.name); q != 32 {
			t.Errorf("final route: broker 3 has %d write queues, want 32", q)
		}
		mu.Lock()
		defer mu.Unlock()
		var seq []uint32
		for i, u := range got {
			seq = append(seq, u.Queues)
			if i > 0 && u.Version == got[i-1].Version {
				t.Errorf("update %d at %s delivered version %x again", i, u.At.Format(time.TimeOnly), u.Version)
			}
			if i > 0 && u.Queues < got[i-1].Queues {
				t.Errorf("update %d at %s went back from %d to %d write queues", i, u.At.Format(time.TimeOnly), got[i-1].Queues, u.Queues)
			}
			if u.Brokers != nBrokers {
				t.Errorf("update %d at %s names %d brokers, want %d", i, u.At.Format(time.TimeOnly), u.Brokers, nBrokers)
			}
		}
		t.Logf("watch: %d updates, broker 3's write queues %v", len(got), seq)
		if len(got) == 0 || got[len(got)-1].Version != finalV {
			t.Errorf("the watch's last update is not the final route (version %x)", finalV)
		}
		readsMu.Lock()
		defer readsMu.Unlock()
		most := uint32(0)
		for i, q := range readQueues {
			if q < most {
				t.Errorf("read %d saw %d write queues after %d", i, q, most)
			}
			most = q
		}
		t.Logf("reads: %d, broker 3's write queues from %d to %d", len(readQueues), readQueues[0], readQueues[len(readQueues)-1])
	})
}
