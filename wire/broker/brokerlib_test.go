package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/nodes"
)

// TestTopicChangeSurvivesAFailedFullRegistration loses the connection while
// a full registration that carries a topic change is in flight, and the
// node still holds the lease at the old version: the reconnect resumes the
// lease, and the change must still reach the node. A slave's topic change
// always goes by full registration (the node refuses a slave's update with
// not-group-leader); a path MTU shrunk to 600 bytes lets the heartbeats
// through but not the registration's full-size packets, nor a new
// connection's Initial, until it grows back.
func TestTopicChangeSurvivesAFailedFullRegistration(t *testing.T) {
	t.Parallel() // waits on a request timeout
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	master := testConfig(t, ca, nodes.Static(tn.Addr()))
	rm := startRegistrar(t, master)
	if err := rm.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	proxy := newProxy(t, tn.Addr())
	slave := testConfig(t, ca, nodes.Static(proxy.Addr()))
	slave.Identity.BrokerID, slave.Identity.Addr = 1, "10.0.0.2:10911"
	slave.Topics = manyTopics("slave", 300) // a registration of many packets
	slave.RequestTimeout = time.Second
	rs := startRegistrar(t, slave)
	waitFor(t, "the slave to register and learn its master", func() bool {
		st := rs.Nodes()
		return len(st) == 1 && st[0].Registered && st[0].MasterAddr == brokerAddr
	})
	dials := rs.Nodes()[0].Dials

	proxy.SetMTU(600)
	if err := rs.UpsertTopics(topics("slave-extra")...); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the registration to fail and the connection to go", func() bool {
		st := rs.Nodes()[0]
		return !st.Connected && st.LastError != ""
	})
	proxy.SetMTU(0)
	waitFor(t, "a new connection that resumes the lease", func() bool {
		st := rs.Nodes()[0]
		return st.Dials > dials && st.Registered
	})
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	if err := rs.WaitSynced(ctx); err != nil {
		st := rs.Nodes()[0]
		t.Fatalf("the topic change never reached the node after the reconnect: %v (registrar at version %d, node acknowledged %d, %d registrations, %d resumes)",
			err, rs.DataVersion().Counter, st.DataVersion.Counter, st.Registrations, st.Resumes)
	}
}

// TestStopAfterANewerRegistration stops a registrar whose lease on the node
// was replaced by a newer registration of the same broker address (a new
// instance of the broker started before the old one stopped, as in a
// rolling restart). The late unregister names the old epoch and the node
// answers stale-epoch: the newer registration stays, and PROTOCOL.md says
// a stale unregister needs nothing more, so Stop reports no failure.
func TestStopAfterANewerRegistration(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	oldCfg := testConfig(t, ca, nodes.Static(tn.Addr()))
	// No heartbeat within the test: the old instance must not notice the
	// newer registration and register again before it stops.
	oldCfg.HeartbeatInterval = time.Hour
	oldCfg.ProbeInterval = -1
	old := startRegistrar(t, oldCfg)
	if err := old.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	newer := startRegistrar(t, testConfig(t, ca, nodes.Static(tn.Addr())))
	if err := newer.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if old.Nodes()[0].Epoch == newer.Nodes()[0].Epoch {
		t.Fatal("the second registration kept the epoch: the test proves nothing")
	}
	if err := old.Stop(ctxT(t)); err != nil {
		t.Errorf("Stop after a newer registration took the lease over: %v", err)
	}
	if l, ok := lease(tn, brokerAddr); !ok || l.Epoch != newer.Nodes()[0].Epoch {
		t.Errorf("the newer registration is gone after the old instance stopped (lease %v, epoch %d)", ok, l.Epoch)
	}
}
