package broker_test

import (
	"net"
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
	if n > 2 {
		t.Errorf("%d full registrations in 20 heartbeat intervals, want at most one per name", n)
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
	if n, _ := regs(); n > 2 {
		t.Errorf("%d full registrations after the takeover, want at most 2", n)
	}
	if err := r.Stop(ctxT(t)); err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, ok := lease(tn, brokerAddr); ok {
		t.Error("the lease outlived Stop")
	}
}
