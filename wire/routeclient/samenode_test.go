package routeclient_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/routeclient"
)

// TestOneNodeListedUnderTwoNames: the node list names node A twice (its
// address and "localhost" with its port) and node B once, so a fresh
// client's two first asks both go to A. A lacks group b2 (cut off from
// it); B holds it. The merged read must not be A's view counted twice:
// a second answer from a node that already answered is no second
// witness, and the next node is asked instead.
func TestOneNodeListedUnderTwoNames(t *testing.T) {
	ca := newTestCA(t)
	tns := sortedNodes(t, ca, 2, nil)
	a, b := tns[0], tns[1]
	_, pa, _ := net.SplitHostPort(a.Addr())
	_, pb, _ := net.SplitHostPort(b.Addr())
	if pa > pb { // "127.0.0.1:pa" < "localhost:pa" < "localhost:pb" is the order asked
		a, b = b, a
		pa, pb = pb, pa
	}
	for _, tn := range tns {
		register(t, tn, "b1", "10.0.0.1:10911", 4, "t1")
	}
	register(t, b, "b2", "10.0.0.2:10911", 4, "t1")
	list := []string{a.Addr(), net.JoinHostPort("localhost", pa), net.JoinHostPort("localhost", pb)}
	// Wait for every answer whatever the dial times: the test is about
	// who is asked, not the hedge.
	c := newClient(t, ca, nodes.Static(list...), func(cfg *routeclient.Config) { cfg.MergeWait = time.Minute })
	for i := range 3 {
		route, _, err := c.Route(ctxT(t), "t1")
		if err != nil || len(route.Brokers) != 2 {
			t.Fatalf("read %d: %d groups, %v; want both (b2 is on the node listed once)", i, len(route.Brokers), err)
		}
		if err := c.Refresh(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}

	// A fresh client's watch: its second stream must not go to A again.
	w := newClient(t, ca, nodes.Static(list...), nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch, err := w.Watch(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	for u := range ch {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		if len(u.Route.Brokers) == 2 {
			return
		}
	}
	t.Fatal("the watch never merged b2, held by the node listed once")
}

// TestNodesClonedFromOneDataDirectory: two distinct nodes give the same
// NodeID (one's data directory was copied from the other's). They are two
// witnesses: a group only the second holds is merged in.
func TestNodesClonedFromOneDataDirectory(t *testing.T) {
	ca := newTestCA(t)
	tns := sortedNodes(t, ca, 2, nil)
	id, err := os.ReadFile(filepath.Join(tns[0].Dir(), "node-id"))
	if err != nil {
		t.Fatal(err)
	}
	tns[1].Stop()
	if err := os.WriteFile(filepath.Join(tns[1].Dir(), "node-id"), id, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // another start millisecond than the first node's
	tns[1].Start()
	for _, tn := range tns {
		register(t, tn, "b1", "10.0.0.1:10911", 4, "t1")
	}
	register(t, tns[1], "b2", "10.0.0.2:10911", 4, "t1")
	c := newClient(t, ca, nodes.Static(addrsOf(tns)...), func(cfg *routeclient.Config) { cfg.MergeWait = time.Minute })
	route, _, err := c.Route(ctxT(t), "t1")
	if err != nil || len(route.Brokers) != 2 {
		t.Fatalf("route: %d groups, %v; want both", len(route.Brokers), err)
	}
}
