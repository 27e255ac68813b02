package gateway_test

import (
	"testing"
	"time"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/remoting"
)

// TestRouteAgeSaysHowOldTheServedRoutesAre: while the nodes are down the
// gateway keeps serving its cached route, and edgereg_gateway_route_age_seconds
// says how long ago a node last confirmed it; once a node answers again the
// age falls back.
func TestRouteAgeSaysHowOldTheServedRoutesAre(t *testing.T) {
	s := startSite(t, 1, func(c *gateway.Config) { c.RefreshInterval = 100 * time.Millisecond })
	s.registerQUIC(orders(4))
	c := s.dial()
	if resp := c.call(goRouteRequest("orders")); resp.Code != remoting.Success {
		t.Fatalf("route: %d %q", resp.Code, resp.Remark)
	}
	const age = "edgereg_gateway_route_age_seconds"
	s.nodes[0].Stop()
	nodetest.WaitFor(t, "the route's age to pass a second while the node is down", func() bool { return s.metric(age) >= 1 })
	if resp := c.call(goRouteRequest("orders")); resp.Code != remoting.Success {
		t.Fatalf("route while the node is down: %d %q", resp.Code, resp.Remark)
	}
	s.nodes[0].Start()
	s.registerQUIC(orders(4))
	nodetest.WaitFor(t, "the route confirmed again", func() bool { return s.metric(age) < 1 })
}
