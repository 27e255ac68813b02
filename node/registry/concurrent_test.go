package registry

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestConcurrentOperations runs registrations, heartbeats, route reads,
// admin edits and expiry scans at once, then checks the invariants.
func TestConcurrentOperations(t *testing.T) {
	clk := newFakeClock()
	r := New(Config{Clock: clk})
	const brokers, rounds = 16, 200
	var wg sync.WaitGroup
	for b := range brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(b), 1))
			g := reg("c"+fmt.Sprint(b%3), fmt.Sprintf("g%d", b%6), int64(b/6), fmt.Sprintf("10.0.0.%d:1", b), "shared")
			g.HeartbeatTimeout = 5 * time.Second
			var epoch uint64
			for i := range rounds {
				switch rng.IntN(8) {
				case 6, 7:
					// Incremental topic changes (tombstones end here) from
					// masters and prime slaves; others are refused.
					g.DataVersion.Counter = uint64(i)
					_, _ = r.UpdateTopics(TopicUpdate{
						Cluster: g.Cluster, Addr: g.Addr, Epoch: epoch, DataVersion: g.DataVersion,
						Upsert: topics(fmt.Sprintf("t%d", rng.IntN(20))), Remove: []string{fmt.Sprintf("t%d", rng.IntN(20))},
					})
				case 5:
					// The address moves to the other group of its cluster
					// (g0..g5 are in c0..c2 by index mod 3).
					var n int
					fmt.Sscanf(g.BrokerName, "g%d", &n)
					g.BrokerName = fmt.Sprintf("g%d", (n+3)%6)
					g.DataVersion.Counter = uint64(i)
					if res, err := r.Register(g); err == nil {
						epoch = res.Epoch
					}
				case 0, 1:
					g.Topics = topics("shared", fmt.Sprintf("t%d", rng.IntN(20)))
					g.DataVersion.Counter = uint64(i)
					if res, err := r.Register(g); err == nil {
						epoch = res.Epoch
					}
				case 2:
					_, _ = r.Heartbeat(g.Cluster, g.Addr, epoch, g.DataVersion)
				case 3:
					_ = r.Unregister(g.Cluster, g.Addr, epoch)
				case 4:
					_, _ = r.Route("shared")
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range rounds {
			clk.Advance(time.Second)
			r.ExpireDue()
			_, _ = r.WipeWritePerm(fmt.Sprintf("g%d", i%6))
			_, _ = r.AddWritePerm(fmt.Sprintf("g%d", (i+1)%6))
			_ = r.DeleteTopic(fmt.Sprintf("t%d", i%20), fmt.Sprintf("c%d", i%3))
			r.ClusterInfo()
			r.Topics()
			for _, name := range r.Topics() {
				_, _, _ = r.RouteData(name)
			}
		}
	}()
	wg.Wait()
	checkInvariants(t, r)
	// Every cached route must equal a fresh build.
	for _, name := range r.Topics() {
		cached, err := r.Route(name)
		if err != nil {
			t.Fatal(err)
		}
		r.mu.RLock()
		fresh, err := r.buildRoute(r.topics[name])
		r.mu.RUnlock()
		if err != nil || fresh.Version != cached.Version {
			t.Errorf("topic %s: cached route is stale", name)
		}
	}
}
