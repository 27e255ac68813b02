package node

import (
	"errors"
	"slices"
	"testing"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// TestRouteAnswersCarryFreshness: get-routes says how fresh the node's
// knowledge of every group named is (not-modified topics included) and the
// node's state, while versions stay those of the route bytes alone.
func TestRouteAnswersCarryFreshness(t *testing.T) {
	tn := startNode(t, nil)
	ctx := ctxT(t)
	broker := tn.dial(pki.RoleBroker)
	reader := tn.dial(pki.RoleClient)
	for _, r := range []*wire.Register{
		registration("c1", "b1", 0, "10.0.0.1:10911", "orders"),
		registration("c1", "b2", 0, "10.0.0.2:10911", "pay"),
	} {
		if _, err := broker.Register(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := reader.GetRoutes(ctx, &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "orders"}, {Topic: "nope"}}})
	if err != nil {
		t.Fatal(err)
	}
	res := rs.Results[0]
	if res.Status != wire.StatusOK || res.Version != wire.RouteVersion(res.Route) {
		t.Fatalf("result %+v: version is not the route bytes' version", res)
	}
	if len(rs.Groups) != 1 || rs.Groups[0].BrokerName != "b1" || rs.Groups[0].AgeMs > 5000 ||
		rs.Groups[0].DeadlineInMs <= 0 {
		t.Errorf("freshness %+v, want b1 alone, heard from recently, lease running", rs.Groups)
	}
	if rs.Node.NodeID != tn.Node.ID() || rs.Node.StartedMs == 0 || rs.Node.WarmingUp != tn.Node.WarmingUp() {
		t.Errorf("node state %+v", rs.Node)
	}
	// Not modified: no route bytes, but the groups are still described.
	rs, err = reader.GetRoutes(ctx, &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "orders", Version: res.Version}, {Topic: "pay"}}})
	if err != nil {
		t.Fatal(err)
	}
	if rs.Results[0].Status != wire.StatusNotModified || len(rs.Groups) != 2 ||
		rs.Groups[0].BrokerName != "b1" || rs.Groups[1].BrokerName != "b2" {
		t.Errorf("not-modified poll: %+v, groups %+v", rs.Results, rs.Groups)
	}
}

// TestNodeInfo: operators get node-info; clients are refused.
func TestNodeInfo(t *testing.T) {
	tn := startNode(t, nil)
	ctx := ctxT(t)
	op := tn.dial(pki.RoleOperator)
	if _, err := op.Register(ctx, registration("c1", "b1", 0, "10.0.0.1:10911", "orders", "pay")); err != nil {
		t.Fatal(err)
	}
	var info wire.NodeInfo
	if err := op.Call(ctx, wire.TypeNodeInfo, nil, &info); err != nil {
		t.Fatal(err)
	}
	if info.NodeID != tn.Node.ID() || info.Leases != 1 || info.Topics != 2 || info.Connections < 1 ||
		info.Version != Version || info.NowMs < info.StartedMs || len(info.Policies) != 0 {
		t.Errorf("node info %+v", info)
	}
	err := tn.dial(pki.RoleClient).Call(ctx, wire.TypeNodeInfo, nil, &info)
	if !errors.Is(err, wire.ErrNotAuthorized) {
		t.Errorf("node-info from a client: %v, want not authorized", err)
	}
}

// TestFilteredRouteFreshness: a route a policy filtered is described by
// the groups it shows, never one it hides; a filtered route the client
// holds (not modified) by none; an unfiltered one beside it by all of its
// own, each group once. A guest call that times out on a loaded machine
// answers with the unfiltered route (the route hook fails open), so reads
// are retried until the policy answered, and every answer, filtered or
// not, must name exactly the groups its routes show.
func TestFilteredRouteFreshness(t *testing.T) {
	tn := startNode(t, nil)
	ctx := policyCtx(t)
	op := tn.dial(pki.RoleOperator)
	zonedBrokers(t, op) // topic t on group-a (zone-1), group-b and group-c (zone-2)
	if _, err := op.Register(ctx, withZone(registration("c1", "group-d", 0, "10.0.4.1:1", "u"), "zone-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := op.PolicyPush(ctx, "route", readModule(t, "zone-affinity.wasm")); err != nil {
		t.Fatal(err)
	}
	reader := tn.dial(pki.RoleClient)
	described := func(rs wire.Routes) []string {
		var out []string
		for _, g := range rs.Groups {
			out = append(out, g.BrokerName)
		}
		return out
	}
	// shown is the groups the OK results' routes name, sorted, each once.
	shown := func(t *testing.T, rs wire.Routes) []string {
		var out []string
		for _, res := range rs.Results {
			if res.Status != wire.StatusOK {
				continue
			}
			var route wire.Route
			if err := wire.Unmarshal(res.Route, &route); err != nil {
				t.Fatal(err)
			}
			for _, q := range route.Queues {
				if !slices.Contains(out, q.BrokerName) {
					out = append(out, q.BrokerName)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	read := func(q *wire.GetRoutes, done func(wire.Routes) bool) wire.Routes {
		t.Helper()
		for range 50 {
			rs, err := reader.GetRoutes(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := described(rs), shown(t, rs); !slices.Equal(got, want) {
				t.Fatalf("answer %+v described by %v, its routes show %v", rs.Results, got, want)
			}
			if done(rs) {
				return rs
			}
		}
		t.Fatal("the route policy never answered")
		return wire.Routes{}
	}
	zone1 := wire.ClientAttrs{Zone: "zone-1"}
	rs := read(&wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "t"}}, Client: zone1}, func(rs wire.Routes) bool {
		return len(shown(t, rs)) == 2
	})
	if got := described(rs); !slices.Equal(got, []string{"group-a", "group-c"}) {
		t.Fatalf("filtered route described by %v, want the groups it shows", got)
	}
	filtered := rs.Results[0].Version
	// Held (not modified) filtered t, and u, which the policy leaves as
	// it is (one group, in the client's zone), twice.
	rs = read(&wire.GetRoutes{Client: zone1, Topics: []wire.TopicVersion{
		{Topic: "t", Version: filtered}, {Topic: "u"}, {Topic: "u"}}}, func(rs wire.Routes) bool {
		return rs.Results[0].Status == wire.StatusNotModified
	})
	if rs.Results[1].Status != wire.StatusOK {
		t.Fatalf("poll: %+v", rs.Results)
	}
	if got := described(rs); !slices.Equal(got, []string{"group-d"}) {
		t.Fatalf("poll described by %v, want u's group alone, once", got)
	}
}
