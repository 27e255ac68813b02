package gateway_test

import (
	"testing"
	"time"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire/remoting"
)

// TestBlackoutLongerThanALease: the site's WAN blacks out for longer than
// the nodes' lease (8 s), so every node expires the broker behind the
// gateway while the broker keeps heartbeating the gateway on its LAN. The
// cached route is served throughout; when the WAN comes back the nodes'
// first word is that the topic is gone, until the gateway's registrar has
// registered the broker again. A client on the LAN must never be told
// TOPIC_NOT_EXIST for the broker it can reach.
func TestBlackoutLongerThanALease(t *testing.T) {
	t.Parallel() // waits on timers
	s, proxies := startWANSite(t, 2)
	c := s.dial()
	if resp := c.call(fixtureCommand(t, "v5_register_broker_request.hex")); resp.Code != remoting.Success {
		t.Fatalf("register: %d %q", resp.Code, resp.Remark)
	}
	nodetest.WaitFor(t, "the lease on every node", func() bool {
		for _, tn := range s.nodes {
			if _, ok := localLease(tn, masterAddr); !ok {
				return false
			}
		}
		return true
	})
	read := func(phase string) {
		t.Helper()
		resp := c.call(goRouteRequest("TopicTest"))
		if resp.Code != remoting.Success {
			t.Fatalf("%s: route of TopicTest: code %d %q", phase, resp.Code, resp.Remark)
		}
	}
	read("before")
	for _, p := range proxies {
		p.SetDropEach(100, 100)
	}
	nodetest.WaitFor(t, "every node to expire the broker", func() bool {
		c.send(fixtureCommand(t, "v5_broker_heartbeat_oneway.hex"))
		read("blacked out")
		time.Sleep(20 * time.Millisecond)
		for _, tn := range s.nodes {
			if _, ok := localLease(tn, masterAddr); ok {
				return false
			}
		}
		return true
	})
	for _, p := range proxies {
		p.SetDropEach(0, 0)
	}
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		read("after the blackout")
	}
	nodetest.WaitFor(t, "the broker registered again on every node", func() bool {
		for _, tn := range s.nodes {
			if _, ok := localLease(tn, masterAddr); !ok {
				return false
			}
		}
		return true
	})
}
