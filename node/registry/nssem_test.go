package registry

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// TestRandomHistoriesKeepNameServerRules replays seeded random histories of
// every writer (registrations of masters and slaves moving between ids,
// groups and clusters, unchanged and changed data versions, updates,
// unregistrations, deletions, write-permission wipes, expiries) and checks
// after each step what RouteInfoManager keeps true: every member has its
// own lease, no empty group or topic, a group without a master writable
// nowhere (cleanTopicByUnRegisterRequests), and every cached route equal to
// one built afresh (pickupTopicRouteData never serves a stale join).
func TestRandomHistoriesKeepNameServerRules(t *testing.T) {
	for seed := uint64(0); seed < 1000; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		r, clk := newTestRegistry(t)
		addrs := []string{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1"}
		groups := []string{"g1", "g2"}
		names := []string{"a", "b", "c", "rmq_sys_SYNC_BROKER_MEMBER_g1"}
		var log []string
		for step := 0; step < 60; step++ {
			// Warm every cache, so that a missed invalidation shows.
			for _, n := range r.Topics() {
				_, _ = r.Route(n)
			}
			addr := addrs[rng.IntN(len(addrs))]
			switch op := rng.IntN(8); op {
			case 0, 1, 2:
				var ts []string
				for _, n := range names {
					if rng.IntN(2) == 0 {
						ts = append(ts, n)
					}
				}
				rg := reg([]string{"c1", "c1", "c2"}[rng.IntN(3)], groups[rng.IntN(2)], int64(rng.IntN(3)), addr, ts...)
				rg.ActingMaster = rng.IntN(2) == 0
				rg.DataVersion.Counter = uint64(rng.IntN(3))
				for i := range rg.Topics {
					if rng.IntN(3) == 0 {
						rg.Topics[i].Perm = wire.PermRead
					}
				}
				before := fmt.Sprint(r.GroupTopics(rg.BrokerName))
				ci := r.ClusterInfo()
				master, hasMaster := ci.Groups[rg.BrokerName].Addrs[wire.MasterID]
				plainSlave := rg.BrokerID != wire.MasterID && hasMaster && master != addr
				res, err := r.Register(rg)
				if err == nil && rg.BrokerID != wire.MasterID {
					// A slave learns its master (and the master's HA
					// address) whenever one is registered.
					m, ok := r.ClusterInfo().Groups[rg.BrokerName].Addrs[wire.MasterID]
					ml, _ := r.Lease(rg.Cluster, m)
					if want := map[bool]string{true: m}[ok]; res.MasterAddr != want || res.MasterHAAddr != ml.HAAddr {
						t.Errorf("seed %d step %d: slave %s told master %q/%q, want %q/%q", seed, step, addr, res.MasterAddr, res.MasterHAAddr, want, ml.HAAddr)
					}
				}
				if err == nil && plainSlave {
					// registerBroker takes topics from the master or the
					// prime slave only.
					if after := fmt.Sprint(r.GroupTopics(rg.BrokerName)); after != before {
						t.Errorf("seed %d step %d: slave %s changed %s's topics %s -> %s", seed, step, addr, rg.BrokerName, before, after)
					}
				}
				log = append(log, fmt.Sprintf("reg %s %s %d %v v%d acting=%v -> %v", rg.BrokerName, addr, rg.BrokerID, ts, rg.DataVersion.Counter, rg.ActingMaster, err))
			case 3:
				if l, ok := r.Lease("c1", addr); ok {
					err := r.Unregister("c1", addr, l.Epoch)
					log = append(log, fmt.Sprintf("unreg %s -> %v", addr, err))
				}
			case 4:
				if l, ok := r.Lease("c1", addr); ok {
					u := TopicUpdate{Cluster: "c1", Addr: addr, Epoch: l.Epoch, DataVersion: wire.DataVersion{Counter: 9}}
					n := names[rng.IntN(len(names))]
					if rng.IntN(2) == 0 {
						u.Upsert = topics(n)
					} else {
						u.Remove = []string{n}
					}
					_, err := r.UpdateTopics(u)
					log = append(log, fmt.Sprintf("update %s %+v %v -> %v", addr, u.Upsert, u.Remove, err))
				}
			case 5:
				n := names[rng.IntN(len(names))]
				err := r.DeleteTopic(n)
				log = append(log, fmt.Sprintf("delete %s -> %v", n, err))
			case 6:
				g := groups[rng.IntN(2)]
				pc, err := r.EditWritePerm(g, false)
				log = append(log, fmt.Sprintf("perm %s -> %+v %v", g, pc, err))
			case 7:
				clk.Advance(time.Duration(rng.IntN(200)) * time.Second)
				ex := r.ExpireDue()
				log = append(log, fmt.Sprintf("expire %d", len(ex)))
			}
			checkInvariants(t, r)
			r.mu.RLock()
			for name, tp := range r.topics {
				cached, _ := r.cachedRoute(tp)
				fresh, _ := r.buildRoute(tp)
				if !bytes.Equal(cached.Body, fresh.Body) {
					t.Errorf("seed %d step %d: stale route of %s\n%v", seed, step, name, log)
				}
			}
			for name, g := range r.groups {
				if _, ok := g.addrs[0]; ok {
					continue
				}
				for tp := range g.topics {
					if i, ok := tp.find(g); ok && tp.queues[i].perm&wire.PermWrite != 0 {
						t.Errorf("seed %d step %d: masterless group %s writable in %s\n%v", seed, step, name, tp.name, log)
					}
				}
			}
			r.mu.RUnlock()
			if t.Failed() {
				return
			}
		}
	}
}
