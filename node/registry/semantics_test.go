package registry

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// TestDeleteTopicSurvivesUnrelatedRegistration: an operator's delete is not
// undone by the broker's next full registration that still names the topic
// for an unrelated reason (a new data version). It returns once a full
// registration has omitted it and a later one names it again, or when the
// broker creates it explicitly (an incremental update naming it).
func TestDeleteTopicSurvivesUnrelatedRegistration(t *testing.T) {
	r, _ := newTestRegistry(t)
	g := reg("c1", "b1", 0, "10.0.0.1:1", "t", "u")
	mustRegister(t, r, g)
	mustRegister(t, r, reg("c2", "b2", 0, "10.0.0.2:1", "t"))
	if err := r.DeleteTopic("t", "c1"); err != nil {
		t.Fatal(err)
	}
	g.DataVersion.Counter++ // something else changed on the broker
	mustRegister(t, r, g)
	if q := mustRoute(t, r, "t").Queues; len(q) != 1 || q[0].BrokerName != "b2" {
		t.Fatalf("after an unrelated registration t is served by %+v, want b2 only: the delete was undone", q)
	}
	// b2's group was not part of the delete: its registrations still count.
	mustRegister(t, r, reg("c2", "b2", 0, "10.0.0.2:1", "t"))

	g.Topics = topics("u") // the broker dropped t: the tombstone has done its job
	g.DataVersion.Counter++
	mustRegister(t, r, g)
	g.Topics = topics("t", "u") // and created it again
	g.DataVersion.Counter++
	res := mustRegister(t, r, g)
	if q := mustRoute(t, r, "t").Queues; len(q) != 2 {
		t.Fatalf("a topic created again after the delete is not served: %+v", q)
	}

	// An incremental update that names a deleted topic creates it again.
	if err := r.DeleteTopic("u"); err != nil {
		t.Fatal(err)
	}
	g.DataVersion.Counter++
	if _, err := r.UpdateTopics(TopicUpdate{Cluster: "c1", Addr: g.Addr, Epoch: res.Epoch, DataVersion: g.DataVersion, Upsert: topics("u")}); err != nil {
		t.Fatal(err)
	}
	mustRoute(t, r, "u")
	checkInvariants(t, r)
}

// TestRequestedTimeoutClamped: a broker may ask for its own lease timeout,
// within the registry's bounds; "10 years" used to be accepted and never
// expired.
func TestRequestedTimeoutClamped(t *testing.T) {
	clk := newFakeClock()
	r := New(Config{Clock: clk, MinThreshold: 3 * time.Second, MaxThreshold: 10 * time.Minute})
	long := reg("c1", "b1", 0, "10.0.0.1:1", "t")
	long.HeartbeatTimeout = 10 * 365 * 24 * time.Hour
	short := reg("c1", "b2", 0, "10.0.0.2:1", "t")
	short.HeartbeatTimeout = time.Millisecond
	mustRegister(t, r, long)
	mustRegister(t, r, short)
	for _, l := range r.Leases() {
		want := map[string]time.Duration{"b1": 10 * time.Minute, "b2": 3 * time.Second}[l.BrokerName]
		if l.Threshold != want {
			t.Errorf("%s asked for %s, got threshold %s, want %s", l.BrokerName, l.RequestedTimeout, l.Threshold, want)
		}
	}
	clk.Advance(10 * time.Minute)
	if got := r.ExpireDue(); len(got) != 2 {
		t.Fatalf("expired %d leases after the maximum, want both", len(got))
	}
	// The defaults bound it too.
	r2, clk2 := newTestRegistry(t)
	mustRegister(t, r2, long)
	clk2.Advance(DefaultMaxThreshold)
	if got := r2.ExpireDue(); len(got) != 1 {
		t.Fatalf("a 10-year lease outlived DefaultMaxThreshold")
	}
	if _, err := r2.Route("t"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatal(err)
	}
}

// TestDemotedMasterLeavesGroupReadOnly: the master's address registers
// again as a slave of its group (id 1, where another slave was) with an
// unchanged data version. The group then has no master, and nobody may
// write to a group without one: its queues must lose write permission, as
// when the master unregisters or expires. Before, the write permission
// stayed, and producers were sent to a group with no master.
func TestDemotedMasterLeavesGroupReadOnly(t *testing.T) {
	r, _ := newTestRegistry(t)
	m := reg("c1", "b1", 0, "10.0.0.1:1", "t")
	mustRegister(t, r, m)
	mustRegister(t, r, reg("c1", "b1", 1, "10.0.0.2:1", "t"))
	m.BrokerID = 1 // demoted, at the slave's id; nothing else changed
	mustRegister(t, r, m)
	route := mustRoute(t, r, "t")
	for _, b := range route.Brokers {
		if _, ok := b.Addrs[0]; ok && b.Addrs[0] != "10.0.0.1:1" {
			t.Fatalf("route shows a master %s that is not registered", b.Addrs[0])
		}
	}
	r.mu.RLock()
	g := r.groups["b1"]
	_, hasMaster := g.addrs[0]
	r.mu.RUnlock()
	if !hasMaster {
		for _, q := range route.Queues {
			if q.Perm&wire.PermWrite != 0 {
				t.Errorf("group b1 has no master but queue data %+v is writable", q)
			}
		}
	}
	checkInvariants(t, r)
}

// TestTombstonesAreBounded answers "do tombstones leak": thousands of
// deleted topics leave at most one tombstone each in the group that held
// them (a delete needs the topic to exist, so deleting again adds none),
// the broker's first full registration that omits them ends them, and a
// group that leaves takes its tombstones with it.
func TestTombstonesAreBounded(t *testing.T) {
	r, _ := newTestRegistry(t)
	const n = 3000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("t%d", i)
	}
	g := reg("c1", "b1", 0, "10.0.0.1:1", names...)
	mustRegister(t, r, g)
	for _, name := range names {
		if err := r.DeleteTopic(name); err != nil {
			t.Fatal(err)
		}
		if err := r.DeleteTopic(name); err == nil {
			t.Fatalf("deleting %s twice succeeded", name)
		}
	}
	tombstones := func() int {
		r.mu.RLock()
		defer r.mu.RUnlock()
		if grp := r.groups["b1"]; grp != nil {
			return len(grp.deleted)
		}
		return 0
	}
	if got := tombstones(); got != n {
		t.Fatalf("%d tombstones after deleting %d topics, want %d", got, n, n)
	}
	g.Topics = topics(names[:10]...) // the broker dropped all but ten
	g.DataVersion.Counter++
	res := mustRegister(t, r, g)
	if got := tombstones(); got != 10 {
		t.Fatalf("%d tombstones after a registration naming ten of them, want 10", got)
	}
	if err := r.Unregister("c1", g.Addr, res.Epoch); err != nil {
		t.Fatal(err)
	}
	if got := tombstones(); got != 0 || len(r.Topics()) != 0 {
		t.Fatalf("after the group left: %d tombstones, topics %v", got, r.Topics())
	}
	checkInvariants(t, r)
}
