package simtest

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// dropCount is what a loss model saw and dropped of the packets in its
// scope. The model runs under the network's lock, but the links still
// carry packets while the test reads the counts after its run: atomics.
type dropCount struct{ seen, dropped atomic.Uint64 }

func (c *dropCount) rate() float64 {
	return float64(c.dropped.Load()) / float64(max(c.seen.Load(), 1))
}

// oneWay drops a share p of the packets from nodes to brokers only: every
// acknowledgement is at risk, no request is (asymmetric loss, as on a
// congested downlink).
func oneWay(p float64, c *dropCount) lossModel {
	return func(rng *rand.Rand, from, to netip.AddrPort, _ int) bool {
		if !isNode(from.Addr()) || !isBroker(to.Addr()) {
			return false
		}
		c.seen.Add(1)
		if rng.Float64() < p {
			c.dropped.Add(1)
			return true
		}
		return false
	}
}

func isNode(a netip.Addr) bool { return a.As4()[0] == 10 && a.As4()[1] == 0 }

// gilbertElliott is a two-state burst loss model per direction of each
// pair of hosts: in the bad state every packet is lost, in the good state
// none; a packet moves a good path to bad with probability toBad, a bad
// one back with probability toGood. The long-run loss is
// toBad/(toBad+toGood), the mean burst 1/toGood packets.
func gilbertElliott(toBad, toGood float64, c *dropCount) lossModel {
	bad := make(map[[2]netip.Addr]bool)
	return func(rng *rand.Rand, from, to netip.AddrPort, _ int) bool {
		k := [2]netip.Addr{from.Addr(), to.Addr()}
		if bad[k] {
			bad[k] = rng.Float64() >= toGood
		} else {
			bad[k] = rng.Float64() < toBad
		}
		c.seen.Add(1)
		if bad[k] {
			c.dropped.Add(1)
		}
		return bad[k]
	}
}

// TestAsymmetricAndBurstLoss runs runLoss's deployment (3 nodes, 20
// brokers, 3 clients, default timings) for 10 virtual minutes on networks
// the uniform loss of TestLossyNetworkDefaults does not model: 30 % of
// the packets from nodes to brokers lost and none the other way (every
// acknowledgement at risk), and Gilbert-Elliott bursts averaging 10 % and
// 30 % loss with mean bursts of 4 and 8 packets on every path. No lease
// may be lost, no registrar register again, no read fail or come back
// short (runLoss's strict checks); the model must really have dropped
// about its share.
//
// The bursts are counted in packets, not time, so a path carrying only
// loss probes (sent at a timeout that doubles with each loss) can stay in
// the bad state for seconds: at 30 % with bursts of 8, 2 of 6 runs had one
// of their 180 explicit refreshes fail, every node's get-routes past its
// 3 s request timeout (reads were served from the cache meanwhile). One
// later run had a route read fail the same way, on all three nodes, once
// in 360: a read goes to the nodes when the cache is no longer fresh,
// under the same bursts. There up to 3 % of the refreshes and of the
// reads may fail (each is logged); none may elsewhere.
func TestAsymmetricAndBurstLoss(t *testing.T) {
	for _, tc := range []struct {
		name      string
		model     func(*dropCount) lossModel
		want      float64
		readFails float64
	}{
		{"one-way=30%", func(c *dropCount) lossModel { return oneWay(0.30, c) }, 0.30, 0},
		{"bursts=10%,len=4", func(c *dropCount) lossModel { return gilbertElliott(0.25*0.1/0.9, 0.25, c) }, 0.10, 0},
		{"bursts=30%,len=8", func(c *dropCount) lossModel { return gilbertElliott(0.125*0.3/0.7, 0.125, c) }, 0.30, 0.03},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var c dropCount
				res := runLossModel(t, simConfig{Seed: 21, Drop: tc.model(&c), ReadFailShare: tc.readFails}, 10*time.Minute, true)
				if got := c.rate(); got < tc.want*0.8 || got > tc.want*1.2 {
					t.Errorf("the model dropped %d of %d packets (%.1f%%), want about %.0f%%", c.dropped.Load(), c.seen.Load(), 100*got, 100*tc.want)
				}
				t.Logf("dropped %d of %d packets in scope (%s)", c.dropped.Load(), c.seen.Load(), fmt.Sprintf("%.1f%%", 100*c.rate()))
				if res.Heartbeats == 0 {
					t.Error("no heartbeat was acknowledged")
				}
			})
		})
	}
}

// TestReorderingAndDuplicates runs runLoss's deployment for 10 virtual
// minutes at 10 % uniform loss with up to 30 ms of random extra latency on
// every packet (a 40 ms round trip: packets sent within 30 ms of each
// other arrive in any order, which QUIC's packet-threshold loss detection
// takes for loss) and 5 % of the packets delivered twice. runLoss's
// strict checks: no lease lost, no registrar registering again, every
// read whole.
func TestReorderingAndDuplicates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		res := runLossModel(t, simConfig{Loss: 0.10, Seed: 23, Jitter: 30 * time.Millisecond, Dup: 0.05}, 10*time.Minute, true)
		if res.Heartbeats == 0 {
			t.Error("no heartbeat was acknowledged")
		}
	})
}
