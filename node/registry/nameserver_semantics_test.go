package registry

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// These tests hold the registry to Apache RocketMQ 5.x's RouteInfoManager
// (registerBroker, unRegisterBroker, cleanTopicByUnRegisterRequests,
// pickupTopicRouteData, scanNotActiveBroker, operateWritePermOfBroker), as a
// RocketMQ broker or client would see it from outside.

// actingGroup registers a master and two slaves of group b1, all with
// enableActingMaster, holding topics.
func actingGroup(t *testing.T, r *Registry, ts ...string) (m, s1, s2 Registration) {
	t.Helper()
	m = reg("c1", "b1", 0, "10.0.0.1:1", ts...)
	s1 = reg("c1", "b1", 1, "10.0.0.2:1", ts...)
	s2 = reg("c1", "b1", 2, "10.0.0.3:1", ts...)
	for _, rg := range []*Registration{&m, &s1, &s2} {
		rg.ActingMaster = true
		mustRegister(t, r, *rg)
	}
	return m, s1, s2
}

// TestSyncBrokerMemberRouteShowsRealMembers: an acting-master broker in
// compatible mode (compatibleWithOldNameSrv, the default) learns its group's
// members from the route of rmq_sys_SYNC_BROKER_MEMBER_<group>, a topic with
// perm INHERIT only. RocketMQ never re-keys the lowest slave to id 0 in that
// route (pickupTopicRouteData returns it untouched): a slave that saw itself
// as id 0 there would take itself for the master and never act for it.
func TestSyncBrokerMemberRouteShowsRealMembers(t *testing.T) {
	r, _ := newTestRegistry(t)
	const sync = "rmq_sys_SYNC_BROKER_MEMBER_b1"
	m, _, _ := actingGroup(t, r, "t")
	// Every broker of the group registers that topic, perm INHERIT (1).
	m.Topics = append(topics("t"), wire.TopicConfig{Name: sync, ReadQueues: 1, WriteQueues: 1, Perm: wire.PermInherit})
	m.DataVersion.Counter++
	mustRegister(t, r, m)
	l, _ := r.Lease("c1", m.Addr)
	if err := r.Unregister("c1", m.Addr, l.Epoch); err != nil {
		t.Fatal(err)
	}
	// An ordinary topic shows the acting master under id 0 ...
	if a := mustRoute(t, r, "t").Brokers[0].Addrs; fmt.Sprint(a) != fmt.Sprint(map[int64]string{0: "10.0.0.2:1", 2: "10.0.0.3:1"}) {
		t.Fatalf("route of t: %v, want the lowest slave under id 0", a)
	}
	// ... the member-group topic the real ids.
	want := map[int64]string{1: "10.0.0.2:1", 2: "10.0.0.3:1"}
	if a := mustRoute(t, r, sync).Brokers[0].Addrs; fmt.Sprint(a) != fmt.Sprint(want) {
		t.Fatalf("route of %s: %v, want the real members %v (no acting-master re-keying)", sync, a, want)
	}
}

// TestMasterExpiryWithSlavesAlive: the default lease is RocketMQ's 120 s;
// a master that goes silent expires, its slaves keep the group and its
// topics readable (read-only), the acting master is shown where allowed,
// and the master's return restores the route.
func TestMasterExpiryWithSlavesAlive(t *testing.T) {
	r, clk := newTestRegistry(t)
	m, s1, s2 := actingGroup(t, r, "t", "u")
	plain := reg("c1", "b2", 0, "10.0.0.4:1", "t")
	mustRegister(t, r, plain)
	ps := reg("c1", "b2", 1, "10.0.0.5:1", "t")
	mustRegister(t, r, ps)

	// The slaves heartbeat (re-register, as RocketMQ brokers do every 30 s);
	// the masters stay silent.
	// (At the deadline itself a lease is due, where RocketMQ's scan wants
	// last+timeout < now: one scan's difference, at most 5 s later there.)
	for i := range 4 {
		step := 30 * time.Second
		if i == 3 {
			step -= time.Millisecond
		}
		clk.Advance(step)
		for _, s := range []Registration{s1, s2, ps} {
			mustRegister(t, r, s)
		}
		if got := r.ExpireDue(); len(got) != 0 {
			t.Fatalf("expired after %d heartbeat periods: %+v", i+1, got)
		}
	}
	clk.Advance(2 * time.Millisecond)
	got := r.ExpireDue()
	if len(got) != 2 {
		t.Fatalf("after 120 s of silence expired %+v, want both masters", got)
	}
	route := mustRoute(t, r, "t")
	if len(route.Queues) != 2 || route.Queues[0].BrokerName != "b1" || route.Queues[1].BrokerName != "b2" {
		t.Fatalf("queues after the masters expired: %+v", route.Queues)
	}
	for i, q := range route.Queues {
		if q.Perm != wire.PermRead || q.ReadQueues != 8 || q.WriteQueues != 8 {
			t.Errorf("queue data of %s after its master expired: %+v, want read-only, counts kept", q.BrokerName, q)
		}
		if _, master := route.Brokers[i].Addrs[wire.MasterID]; master != (q.BrokerName == "b1") {
			t.Errorf("broker data of %s: %v (acting master only where the group allows it)", q.BrokerName, route.Brokers[i].Addrs)
		}
	}
	if a := route.Brokers[1].Addrs; len(a) != 1 || a[1] != ps.Addr {
		t.Errorf("b2 without acting master: %v, want its slave under id 1", a)
	}
	// Cluster info is never re-keyed.
	if a := r.ClusterInfo().Groups["b1"].Addrs; len(a) != 2 || a[1] != s1.Addr || a[2] != s2.Addr {
		t.Errorf("cluster info of b1: %v", a)
	}
	// The master comes back with the same data version as before: its
	// first registration since it expired is applied (RocketMQ's
	// registerFirst), so the queues are writable again.
	mustRegister(t, r, m)
	route = mustRoute(t, r, "t")
	if route.Queues[0].Perm != wire.PermRead|wire.PermWrite || route.Brokers[0].Addrs[0] != m.Addr || route.Brokers[0].Addrs[1] != s1.Addr {
		t.Fatalf("after the master returned: %+v", route)
	}
	checkInvariants(t, r)
}

// TestUnregisterSlaveOrMaster: unregistering a slave takes only its address
// out; unregistering the master keeps the group for its slaves; the last
// member takes the group, its topics and its cluster with it.
func TestUnregisterSlaveOrMaster(t *testing.T) {
	r, _ := newTestRegistry(t)
	m := mustRegister(t, r, reg("c1", "b1", 0, "10.0.0.1:1", "t", "only-b1"))
	s := mustRegister(t, r, reg("c1", "b1", 1, "10.0.0.2:1", "t"))
	mustRegister(t, r, reg("c2", "b2", 0, "10.0.0.3:1", "t"))

	if err := r.Unregister("c1", "10.0.0.2:1", s.Epoch); err != nil {
		t.Fatal(err)
	}
	route := mustRoute(t, r, "t")
	if a := route.Brokers[0].Addrs; len(a) != 1 || a[0] != "10.0.0.1:1" || route.Queues[0].Perm != 6 {
		t.Fatalf("after the slave left: %+v", route)
	}
	if err := r.Unregister("c1", "10.0.0.1:1", m.Epoch); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Route("only-b1"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("a topic left without queue data: %v, want not found", err)
	}
	if q := mustRoute(t, r, "t").Queues; len(q) != 1 || q[0].BrokerName != "b2" {
		t.Fatalf("t after b1 left: %+v", q)
	}
	ci := r.ClusterInfo()
	if _, ok := ci.Clusters["c1"]; ok || len(ci.Groups) != 1 {
		t.Fatalf("an emptied cluster stays: %+v", ci)
	}
	if _, err := r.TopicsByCluster("c1"); !errors.Is(err, ErrClusterNotFound) {
		t.Fatalf("topics of an emptied cluster: %v", err)
	}
}

// TestQueueDataAsRegistered: perm (with INHERIT and PRIORITY), sysFlag and
// queue counts are stored as the master registered them, per group, and
// the route's queue and broker datas describe the same groups.
func TestQueueDataAsRegistered(t *testing.T) {
	r, _ := newTestRegistry(t)
	b1 := reg("c1", "b1", 0, "10.0.0.1:1")
	b1.Topics = []wire.TopicConfig{
		{Name: "TBW102", ReadQueues: 8, WriteQueues: 8, Perm: wire.PermRead | wire.PermWrite | wire.PermInherit},
		{Name: "t", ReadQueues: 4, WriteQueues: 2, Perm: wire.PermPriority | wire.PermRead, SysFlag: wire.SysFlagUnit | wire.SysFlagUnitSub},
	}
	b2 := reg("c1", "a0", 0, "10.0.0.2:1")
	b2.Zone = "z1"
	b2.Topics = []wire.TopicConfig{{Name: "t", ReadQueues: 16, WriteQueues: 16, Perm: wire.PermRead | wire.PermWrite}}
	mustRegister(t, r, b1)
	mustRegister(t, r, b2)
	if q := mustRoute(t, r, "TBW102").Queues[0]; q.Perm != 7 {
		t.Fatalf("TBW102 perm %d, want 7", q.Perm)
	}
	route := mustRoute(t, r, "t")
	want := []wire.QueueData{
		{BrokerName: "a0", ReadQueues: 16, WriteQueues: 16, Perm: 6},
		{BrokerName: "b1", ReadQueues: 4, WriteQueues: 2, Perm: 12, SysFlag: 3},
	}
	if fmt.Sprint(route.Queues) != fmt.Sprint(want) {
		t.Fatalf("queues %+v, want %+v", route.Queues, want)
	}
	for i, b := range route.Brokers {
		if b.Name != route.Queues[i].BrokerName || b.Cluster != "c1" {
			t.Fatalf("broker data %d %+v does not describe queue data %+v", i, b, route.Queues[i])
		}
	}
	if route.Brokers[0].Zone != "z1" || route.Brokers[1].Zone != "" {
		t.Fatalf("zones: %+v", route.Brokers)
	}
	// The unit lists look at the topic's queue data: t's first (a0) has no flag.
	if u := r.UnitTopics(); len(u) != 0 {
		t.Fatalf("unit topics %v: the first queue data of t has no unit flag", u)
	}
}

// TestZoneFollowsLastRegistration: RocketMQ sets the group's zoneName (and
// enableActingMaster) from every registration of any member.
func TestZoneFollowsLastRegistration(t *testing.T) {
	r, _ := newTestRegistry(t)
	m := reg("c1", "b1", 0, "10.0.0.1:1", "t")
	m.Zone = "z1"
	mustRegister(t, r, m)
	s := reg("c1", "b1", 1, "10.0.0.2:1")
	s.Zone = "z2"
	mustRegister(t, r, s)
	if z := mustRoute(t, r, "t").Brokers[0].Zone; z != "z2" {
		t.Fatalf("zone %q after the slave registered with z2", z)
	}
	if z := r.ClusterInfo().Groups["b1"].Zone; z != "z2" {
		t.Fatalf("cluster info zone %q", z)
	}
}

// TestReregistrationDataVersion: an unchanged data version changes nothing
// (not even queue counts the broker now sends); a changed one applies.
func TestReregistrationDataVersion(t *testing.T) {
	r, _ := newTestRegistry(t)
	m := reg("c1", "b1", 0, "10.0.0.1:1", "t")
	mustRegister(t, r, m)
	v1 := mustRoute(t, r, "t")
	m.Topics[0].ReadQueues, m.Topics[0].Perm = 2, wire.PermRead
	mustRegister(t, r, m)
	if got := mustRoute(t, r, "t"); fmt.Sprint(got) != fmt.Sprint(v1) {
		t.Fatalf("same data version changed the route: %+v", got)
	}
	m.DataVersion.Timestamp++ // DataVersion.equals compares the timestamp too
	mustRegister(t, r, m)
	if q := mustRoute(t, r, "t").Queues[0]; q.ReadQueues != 2 || q.Perm != wire.PermRead {
		t.Fatalf("a new timestamp was not applied: %+v", q)
	}
}

// TestEditWritePermCounts: an edit visits every topic the group holds
// (RocketMQ's wipeTopicCount / addTopicCount count them all) and says how
// many changed; restoring sets READ|WRITE and drops INHERIT and PRIORITY.
func TestEditWritePermCounts(t *testing.T) {
	r, _ := newTestRegistry(t)
	m := reg("c1", "b1", 0, "10.0.0.1:1", "a", "b")
	m.Topics = append(m.Topics, wire.TopicConfig{Name: "ro", ReadQueues: 1, WriteQueues: 1, Perm: wire.PermRead | wire.PermInherit})
	mustRegister(t, r, m)
	mustRegister(t, r, reg("c1", "b2", 0, "10.0.0.2:1", "a", "z"))
	steps := []struct {
		add  bool
		want PermChange
	}{
		{false, PermChange{Topics: 3, Changed: 2}},
		{false, PermChange{Topics: 3, Changed: 0}},
		{true, PermChange{Topics: 3, Changed: 3}},
		{true, PermChange{Topics: 3, Changed: 0}},
	}
	for i, s := range steps {
		got, err := r.EditWritePerm("b1", s.add)
		if err != nil || got != s.want {
			t.Fatalf("step %d (add %v): %+v %v, want %+v", i, s.add, got, err, s.want)
		}
	}
	if q := mustRoute(t, r, "ro").Queues[0]; q.Perm != wire.PermRead|wire.PermWrite {
		t.Fatalf("restored perm %d, want 6 (INHERIT dropped)", q.Perm)
	}
	if q := mustRoute(t, r, "z").Queues[0]; q.Perm != 6 {
		t.Fatalf("another group's topic changed: %+v", q)
	}
	if _, err := r.EditWritePerm("nosuch", false); !errors.Is(err, ErrBrokerGroupNotFound) {
		t.Fatalf("unknown group: %v", err)
	}
	checkInvariants(t, r)
}
