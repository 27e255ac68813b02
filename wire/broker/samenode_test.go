package broker_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/broker"
	"github.com/edgereg/edgereg/wire/nodes"
)

// TestOneNodeListedUnderTwoNames: a node source that lists one node twice,
// under its address and under a name that resolves to it (an A record and
// a CNAME, a Kubernetes service name beside the pod address), must not
// make the broker's two sessions with that node unseat each other's
// registration at every heartbeat (each answered stale-epoch, each
// registering in full again). One session keeps the lease, the other
// stands by, and takes over when the first name leaves the list.
func TestOneNodeListedUnderTwoNames(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	_, port, _ := net.SplitHostPort(tn.Addr())
	alias := net.JoinHostPort("localhost", port)
	list := nodes.NewList(tn.Addr(), alias)
	r := startRegistrar(t, testConfig(t, ca, list))
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // 20 heartbeat intervals
	regs := func() (n uint64, sts []broker.NodeState) {
		for _, s := range r.Nodes() {
			t.Logf("%s: node %q same as %q registered %v registrations %d heartbeats %d err %q",
				s.Addr, s.NodeID, s.SameNodeAs, s.Registered, s.Registrations, s.Heartbeats, s.LastError)
			n += s.Registrations
			sts = append(sts, s)
		}
		return n, sts
	}
	n, sts := regs()
	// Both names register before either knows the node's identity; the
	// one that keeps the lease may then have a heartbeat on its way with
	// the epoch the other's registration replaced, and register once more.
	if n > 3 {
		t.Errorf("%d full registrations in 20 heartbeat intervals, want at most one per name and one more", n)
	}
	if len(sts) != 2 || (sts[0].SameNodeAs == "") == (sts[1].SameNodeAs == "") {
		t.Fatalf("want one session keeping the lease and one standing by, got %+v", sts)
	}
	keeper, standby := sts[0], sts[1]
	if keeper.SameNodeAs != "" {
		keeper, standby = standby, keeper
	}
	if standby.SameNodeAs != keeper.Addr || standby.NodeID == "" || standby.NodeID != keeper.NodeID {
		t.Errorf("standby %+v does not name the keeper %s", standby, keeper.Addr)
	}

	list.Set(standby.Addr) // the keeper's name leaves the list
	waitFor(t, "the standby to take the lease over", func() bool {
		st := r.Nodes()
		return len(st) == 1 && st[0].Registered && st[0].SameNodeAs == ""
	})
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, ok := lease(tn, brokerAddr); !ok {
		t.Fatal("the node lost the lease")
	}
	before := r.Nodes()[0].Heartbeats
	waitFor(t, "heartbeats from the session that took over", func() bool { return r.Nodes()[0].Heartbeats >= before+5 })
	if n2, _ := regs(); n2 > n+1 {
		t.Errorf("%d full registrations after the takeover, %d before: want at most one more", n2, n)
	}
	if err := r.Stop(ctxT(t)); err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, ok := lease(tn, brokerAddr); ok {
		t.Error("the lease outlived Stop")
	}
}

// TestNodesClonedFromOneDataDirectory: two distinct nodes give the same
// NodeID (the second's data directory was copied from the first, as a VM
// image or a restored backup makes it). They are still two nodes: the
// broker must hold a lease on each.
func TestNodesClonedFromOneDataDirectory(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 2)
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
	r := startRegistrar(t, testConfig(t, ca, nodes.Static(addrs...)))
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // 10 heartbeat intervals, time to find each node's identity
	for _, tn := range tns {
		if _, ok := lease(tn, brokerAddr); !ok {
			t.Errorf("node %s holds no lease: %+v", tn.Addr(), r.Nodes())
		}
	}
	for _, s := range r.Nodes() {
		if s.SameNodeAs != "" {
			t.Errorf("%s stands by for %s, another node", s.Addr, s.SameNodeAs)
		}
	}
}

// TestNodeUnderTwoNamesRestarts: the node listed under two names restarts
// empty. Both sessions lose their connections; the one that stood by
// waits to learn the node's identity on its new connection before acting,
// so the restart costs about one full registration, as with one name.
func TestNodeUnderTwoNamesRestarts(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	_, port, _ := net.SplitHostPort(tn.Addr())
	cfg := testConfig(t, ca, nodes.Static(tn.Addr(), net.JoinHostPort("localhost", port)))
	r := startRegistrar(t, cfg)
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	standing := func() bool {
		for _, s := range r.Nodes() {
			if s.SameNodeAs != "" {
				return true
			}
		}
		return false
	}
	waitFor(t, "one session standing by", standing)
	total := func() (n uint64) {
		for _, s := range r.Nodes() {
			n += s.Registrations
		}
		return n
	}
	for round := range 3 {
		before := total()
		tn.Restart()
		waitFor(t, "the lease on the restarted node", func() bool { _, ok := lease(tn, brokerAddr); return ok })
		waitFor(t, "one session standing by again", standing)
		time.Sleep(300 * time.Millisecond) // 6 heartbeat intervals
		if _, ok := lease(tn, brokerAddr); !ok {
			t.Fatalf("round %d: the restarted node lost the lease again", round)
		}
		if n := total() - before; n > 3 {
			t.Errorf("round %d: %d full registrations for one restart, want at most 3", round, n)
		}
		t.Logf("round %d: %d full registrations", round, total()-before)
	}
}
