package simtest

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire/broker"
)

// TestBrokersFollowTheNodesHeartbeatInterval runs two nodes with
// --heartbeat-interval 5s --expiry-threshold 20s and brokers at the
// defaults (30 s heartbeats): the nodes tell the brokers their interval and
// threshold in every lease acknowledgement, the brokers heartbeat every
// 5 s, and no lease is ever lost over 3 minutes. Before, the first lease
// expired 20 s after the registration.
func TestBrokersFollowTheNodesHeartbeatInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const nBrokers = 3
		s := newSim(t, simConfig{Nodes: 2, Brokers: nBrokers, Seed: 6, Node: func(c *node.Config) {
			c.HeartbeatInterval = 5 * time.Second
			c.ExpiryThreshold = 20 * time.Second
		}})
		s.waitSynced(time.Minute)
		before := s.snapshotLeases()
		for range 180 {
			time.Sleep(time.Second)
			for _, sn := range s.nodes {
				if n := sn.leases(); n != nBrokers {
					t.Fatalf("%s after sync: node %d holds %d leases, want %d", time.Since(sn.started).Round(time.Second), sn.idx, n, nBrokers)
				}
			}
		}
		for _, lost := range s.leasesLost(before) {
			t.Errorf("lease lost: %s", lost)
		}
		for _, b := range s.brokers {
			if iv := b.r.HeartbeatInterval(); iv != 5*time.Second {
				t.Errorf("broker %d heartbeats every %s, want the nodes' 5s (configured %s)", b.idx, iv, broker.DefaultHeartbeatInterval)
			}
			for _, st := range b.r.Nodes() {
				if st.NodeHeartbeatInterval != 5*time.Second || st.Threshold != 20*time.Second {
					t.Errorf("broker %d, node %s: told interval %s and threshold %s, want 5s and 20s", b.idx, st.Addr, st.NodeHeartbeatInterval, st.Threshold)
				}
				// 180 s at 5 s, less up to a tenth of jitter.
				if st.Heartbeats < 180/5 {
					t.Errorf("broker %d, node %s: %d heartbeats in 180 s, want at least %d", b.idx, st.Addr, st.Heartbeats, 180/5)
				}
			}
		}
	})
}
