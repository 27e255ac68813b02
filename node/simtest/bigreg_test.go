package simtest

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgereg/edgereg/node"
)

// TestLargeRegistrationOverLossyLink registers a broker of 20,000 topics
// (a 0.65 MB registration) over a 100 ms link losing 10 % of packets each
// way; the node's --read-timeout is raised to a minute, as the README says
// to for large registrations over lossy links. The registration takes
// about 10 s to cross. Before, every attempt was cut at the registrar's
// 5 s request timeout and started over: 24 dials in 5 minutes and never
// registered. A full registration may now take the request timeout plus a
// millisecond per topic.
func TestLargeRegistrationOverLossyLink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, simConfig{Nodes: 1, Brokers: 1, RTT: 100 * time.Millisecond, Loss: 0.10, Seed: 11, ExtraTopics: 20000,
			Node: func(c *node.Config) { c.ReadTimeout = time.Minute }})
		start := time.Now()
		s.waitSynced(5 * time.Minute)
		net := s.net.snapshot()
		t.Logf("registered after %s: %+v; net %+v", time.Since(start), s.brokerTotals(), net)
		if net.Lost == 0 {
			t.Error("the simulated network dropped nothing")
		}
		if got := s.nodes[0].leases(); got != 1 {
			t.Errorf("node holds %d leases, want 1", got)
		}
	})
}
