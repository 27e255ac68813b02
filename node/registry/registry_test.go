package registry

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newTestRegistry(t testing.TB) (*Registry, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	return New(Config{Clock: clk}), clk
}

func topics(names ...string) []wire.TopicConfig {
	out := make([]wire.TopicConfig, len(names))
	for i, n := range names {
		out[i] = wire.TopicConfig{Name: n, ReadQueues: 8, WriteQueues: 8, Perm: wire.PermRead | wire.PermWrite}
	}
	return out
}

func reg(cluster, name string, id int64, addr string, ts ...string) Registration {
	return Registration{
		Cluster: cluster, BrokerName: name, BrokerID: id, Addr: addr,
		HAAddr: haAddr(addr), DataVersion: wire.DataVersion{Counter: 1}, Topics: topics(ts...),
	}
}

// haAddr is an HA address for a broker at addr: a 0 appended to its port
// ("h:1" has "h:10"), or its port plus one where that would pass 65535.
func haAddr(addr string) string {
	if wire.CheckHostPort(addr+"0") == nil {
		return addr + "0"
	}
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	return net.JoinHostPort(host, strconv.Itoa(p+1))
}

func mustRegister(t testing.TB, r *Registry, rg Registration) RegisterResult {
	t.Helper()
	res, err := r.Register(rg)
	if err != nil {
		t.Fatalf("Register(%s): %v", rg.Addr, err)
	}
	return res
}

func mustRoute(t testing.TB, r *Registry, topic string) wire.Route {
	t.Helper()
	route, _, err := r.RouteData(topic)
	if err != nil {
		t.Fatalf("RouteData(%s): %v", topic, err)
	}
	return route
}

func TestRegisterAndRoute(t *testing.T) {
	r, _ := newTestRegistry(t)
	mustRegister(t, r, reg("c1", "b1", 0, "10.0.0.1:10911", "orders", "payments"))
	mustRegister(t, r, reg("c1", "b2", 0, "10.0.0.2:10911", "orders"))

	route := mustRoute(t, r, "orders")
	if got := []string{route.Queues[0].BrokerName, route.Queues[1].BrokerName}; !slices.Equal(got, []string{"b1", "b2"}) {
		t.Fatalf("queues = %v, want b1, b2 sorted", got)
	}
	if len(route.Brokers) != 2 || route.Brokers[1].Addrs[0] != "10.0.0.2:10911" || route.Brokers[0].Cluster != "c1" {
		t.Fatalf("brokers = %+v", route.Brokers)
	}
	if q := route.Queues[0]; q.ReadQueues != 8 || q.WriteQueues != 8 || q.Perm != wire.PermRead|wire.PermWrite {
		t.Fatalf("queue data = %+v", q)
	}
	if _, err := r.Route("missing"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("Route(missing) = %v, want ErrTopicNotFound", err)
	}
}

func TestRegisterValidation(t *testing.T) {
	r, _ := newTestRegistry(t)
	cases := []struct {
		name string
		edit func(*Registration)
	}{
		{"empty cluster", func(g *Registration) { g.Cluster = "" }},
		{"empty broker name", func(g *Registration) { g.BrokerName = "" }},
		{"bad address", func(g *Registration) { g.Addr = "nohostport" }},
		{"bad HA address", func(g *Registration) { g.HAAddr = "x" }},
		{"negative id", func(g *Registration) { g.BrokerID = -1 }},
		{"bad topic", func(g *Registration) { g.Topics = topics("has space") }},
		{"long topic", func(g *Registration) { g.Topics = topics(string(make([]byte, 200))) }},
		{"control char", func(g *Registration) { g.Zone = "z\x00" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := reg("c1", "b1", 0, "10.0.0.1:1", "t")
			tc.edit(&g)
			if _, err := r.Register(g); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
	if len(r.Topics()) != 0 || len(r.Leases()) != 0 {
		t.Fatal("an invalid registration changed the registry")
	}
}

func TestGroupClusterConflict(t *testing.T) {
	r, _ := newTestRegistry(t)
	mustRegister(t, r, reg("c1", "b1", 0, "10.0.0.1:1", "t"))
	if _, err := r.Register(reg("c2", "b1", 1, "10.0.0.2:1", "t")); !errors.Is(err, ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
}

func TestSlaveLearnsMaster(t *testing.T) {
	r, _ := newTestRegistry(t)
	slave := mustRegister(t, r, reg("c1", "b1", 1, "10.0.0.2:1", "t"))
	if slave.MasterAddr != "" {
		t.Fatalf("slave before master learned %q", slave.MasterAddr)
	}
	mustRegister(t, r, reg("c1", "b1", 0, "10.0.0.1:1", "t"))
	slave = mustRegister(t, r, reg("c1", "b1", 1, "10.0.0.2:1", "t"))
	if slave.MasterAddr != "10.0.0.1:1" || slave.MasterHAAddr != "10.0.0.1:10" {
		t.Fatalf("slave learned master %q HA %q", slave.MasterAddr, slave.MasterHAAddr)
	}
}

func TestTopicConfigOnlyFromMaster(t *testing.T) {
	r, _ := newTestRegistry(t)
	mustRegister(t, r, reg("c1", "b1", 0, "10.0.0.1:1", "a"))
	mustRegister(t, r, reg("c1", "b1", 1, "10.0.0.2:1", "a", "slave-only"))
	if _, err := r.Route("slave-only"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("a slave's topic was accepted: %v", err)
	}
}

func TestMasterSlaveSwitch(t *testing.T) {
	r, _ := newTestRegistry(t)
	mustRegister(t, r, reg("c1", "b1", 0, "10.0.0.1:1", "t"))
	mustRegister(t, r, reg("c1", "b1", 1, "10.0.0.2:1", "t"))
	// The master goes away; its slave is promoted and registers as id 0.
	leases := r.Leases()
	if err := r.Unregister("c1", "10.0.0.1:1", leases[0].Epoch); err != nil {
		t.Fatal(err)
	}
	promoted := reg("c1", "b1", 0, "10.0.0.2:1", "t", "new")
	mustRegister(t, r, promoted)
	route := mustRoute(t, r, "t")
	addrs := route.Brokers[0].Addrs
	if len(addrs) != 1 || addrs[0] != "10.0.0.2:1" {
		t.Fatalf("after switch addrs = %v, want {0: 10.0.0.2:1}: one address is one id", addrs)
	}
	mustRoute(t, r, "new") // the new master's topics are accepted
	if ls := r.Leases(); len(ls) != 1 || ls[0].BrokerID != 0 {
		t.Fatalf("leases = %+v", ls)
	}
}

func TestSameIDNewAddress(t *testing.T) {
	r, _ := newTestRegistry(t)
	first := reg("c1", "b1", 0, "10.0.0.1:1", "t")
	first.DataVersion.State = 5
	mustRegister(t, r, first)

	older := reg("c1", "b1", 0, "10.0.0.9:1", "t")
	older.DataVersion.State = 4
	if _, err := r.Register(older); !errors.Is(err, ErrStaleState) {
		t.Fatalf("older state at a new address: err = %v, want ErrStaleState", err)
	}
	newer := reg("c1", "b1", 0, "10.0.0.9:1", "t")
	newer.DataVersion.State = 6
	mustRegister(t, r, newer)
	route := mustRoute(t, r, "t")
	if a := route.Brokers[0].Addrs; len(a) != 1 || a[0] != "10.0.0.9:1" {
		t.Fatalf("addrs = %v, want the new address only", a)
	}
	if ls := r.Leases(); len(ls) != 1 || ls[0].Addr != "10.0.0.9:1" {
		t.Fatalf("the old address kept a lease: %+v", ls)
	}
}

func TestActingMaster(t *testing.T) {
	r, _ := newTestRegistry(t)
	m := reg("c1", "b1", 0, "10.0.0.1:1", "t")
	m.ActingMaster = true
	s1 := reg("c1", "b1", 1, "10.0.0.2:1", "t")
	s1.ActingMaster = true
	s2 := reg("c1", "b1", 2, "10.0.0.3:1", "t")
	s2.ActingMaster = true
	mustRegister(t, r, m)
	mustRegister(t, r, s1)
	mustRegister(t, r, s2)
	mres := r.Leases()[0]
	if err := r.Unregister("c1", "10.0.0.1:1", mres.Epoch); err != nil {
		t.Fatal(err)
	}
	route := mustRoute(t, r, "t")
	if route.Queues[0].Perm&wire.PermWrite != 0 {
		t.Fatalf("perm %d still writable after the master left", route.Queues[0].Perm)
	}
	want := map[int64]string{0: "10.0.0.2:1", 2: "10.0.0.3:1"}
	if a := route.Brokers[0].Addrs; fmt.Sprint(a) != fmt.Sprint(want) {
		t.Fatalf("addrs = %v, want lowest slave shown as 0: %v", a, want)
	}
	// The acting master may register topics, read-only.
	s1.Topics = topics("t", "acting")
	s1.DataVersion.Counter++
	mustRegister(t, r, s1)
	route = mustRoute(t, r, "acting")
	if route.Queues[0].Perm&wire.PermWrite != 0 {
		t.Fatal("an acting master's topic is writable")
	}
	// Without supportActingMaster the group shows as it is.
	r2 := New(Config{NoActingMaster: true})
	mustRegister(t, r2, s1)
	mustRegister(t, r2, s2)
	if a := mustRoute(t, r2, "acting").Brokers[0].Addrs; a[0] != "" || a[1] != "10.0.0.2:1" {
		t.Fatalf("NoActingMaster addrs = %v", a)
	}
}

func TestSameVersionOnlyRefreshesLease(t *testing.T) {
	r, clk := newTestRegistry(t)
	g := reg("c1", "b1", 0, "10.0.0.1:1", "a", "b")
	first := mustRegister(t, r, g)
	clk.Advance(10 * time.Second)
	g.Topics = topics("a") // same data version: topics must not be re-read
	second := mustRegister(t, r, g)
	mustRoute(t, r, "b")
	if !second.Deadline.After(first.Deadline) {
		t.Fatal("lease was not refreshed")
	}
	if second.Epoch <= first.Epoch {
		t.Fatalf("epoch %d not after %d", second.Epoch, first.Epoch)
	}
	g.DataVersion.Counter++ // a new version is authoritative
	mustRegister(t, r, g)
	if _, err := r.Route("b"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("topic b kept after a full registration without it: %v", err)
	}
}

func TestUpdateTopics(t *testing.T) {
	r, _ := newTestRegistry(t)
	res := mustRegister(t, r, reg("c1", "b1", 0, "10.0.0.1:1", "a", "b"))
	slave := mustRegister(t, r, reg("c1", "b1", 1, "10.0.0.2:1"))
	v2 := wire.DataVersion{Counter: 2}
	up := TopicUpdate{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: res.Epoch, DataVersion: v2,
		Upsert: []wire.TopicConfig{{Name: "c", ReadQueues: 4, WriteQueues: 4, Perm: 6}, {Name: "a", ReadQueues: 1, WriteQueues: 1, Perm: 4}},
		Remove: []string{"b"}}
	if _, err := r.UpdateTopics(up); err != nil {
		t.Fatal(err)
	}
	if q := mustRoute(t, r, "a").Queues[0]; q.ReadQueues != 1 || q.Perm != 4 {
		t.Fatalf("a = %+v", q)
	}
	mustRoute(t, r, "c")
	if _, err := r.Route("b"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatal("b not removed")
	}
	hb, err := r.Heartbeat("c1", "10.0.0.1:1", res.Epoch, v2)
	if err != nil || hb.VersionChanged {
		t.Fatalf("heartbeat after update: %+v %v, want version unchanged", hb, err)
	}
	cases := []struct {
		name string
		u    TopicUpdate
		want error
	}{
		{"slave", TopicUpdate{Cluster: "c1", Addr: "10.0.0.2:1", Epoch: slave.Epoch, Upsert: topics("x")}, ErrNotGroupLeader},
		{"stale epoch", TopicUpdate{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: res.Epoch - 1, Upsert: topics("x")}, ErrStaleEpoch},
		{"unregistered", TopicUpdate{Cluster: "c1", Addr: "10.0.0.9:1", Epoch: 1, Upsert: topics("x")}, ErrLeaseNotFound},
		{"bad name", TopicUpdate{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: res.Epoch, Upsert: topics("x y")}, ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.UpdateTopics(tc.u); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := r.Route("x"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatal("a refused update changed the registry")
	}
}

func TestHeartbeat(t *testing.T) {
	r, clk := newTestRegistry(t)
	g := reg("c1", "b1", 0, "10.0.0.1:1", "t")
	res := mustRegister(t, r, g)
	clk.Advance(30 * time.Second)
	hb, err := r.Heartbeat("c1", g.Addr, res.Epoch, g.DataVersion)
	if err != nil {
		t.Fatal(err)
	}
	if hb.VersionChanged || !hb.Deadline.Equal(clk.Now().Add(DefaultThreshold)) || hb.Epoch != res.Epoch {
		t.Fatalf("heartbeat = %+v", hb)
	}
	if hb, _ = r.Heartbeat("c1", g.Addr, res.Epoch, wire.DataVersion{Counter: 9}); !hb.VersionChanged {
		t.Fatal("a different data version was not reported")
	}
	if _, err := r.Heartbeat("c1", "10.0.0.7:1", 1, g.DataVersion); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("unknown broker: %v", err)
	}
	if _, err := r.Heartbeat("c1", g.Addr, res.Epoch+1, g.DataVersion); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("wrong epoch: %v", err)
	}
	info := r.Leases()[0]
	if info.Heartbeats != 2 || info.Intervals[0] != 0 || info.Intervals[1] != 30*time.Second {
		t.Fatalf("lease stats = %d beats, intervals %v", info.Heartbeats, info.Intervals[:2])
	}
}

func TestUnregister(t *testing.T) {
	r, _ := newTestRegistry(t)
	m := mustRegister(t, r, reg("c1", "b1", 0, "10.0.0.1:1", "t", "u"))
	s := mustRegister(t, r, reg("c1", "b1", 1, "10.0.0.2:1"))
	mustRegister(t, r, reg("c1", "b2", 0, "10.0.0.3:1", "u"))

	if err := r.Unregister("c1", "10.0.0.2:1", s.Epoch); err != nil {
		t.Fatal(err)
	}
	if a := mustRoute(t, r, "t").Brokers[0].Addrs; len(a) != 1 {
		t.Fatalf("slave still in route: %v", a)
	}
	if err := r.Unregister("c1", "10.0.0.1:1", m.Epoch); err != nil {
		t.Fatal(err)
	}
	// The group is empty: it disappears with its queue data.
	if _, err := r.Route("t"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("topic of an empty group kept: %v", err)
	}
	if q := mustRoute(t, r, "u").Queues; len(q) != 1 || q[0].BrokerName != "b2" {
		t.Fatalf("u queues = %+v", q)
	}
	if _, ok := r.ClusterInfo().Groups["b1"]; ok {
		t.Fatal("empty group b1 kept")
	}
	if err := r.Unregister("c1", "10.0.0.1:1", m.Epoch); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("second unregister: %v", err)
	}
	checkInvariants(t, r)
}

// TestEpochRace is rocketmq#11043: an unregister (or an expiry) decided
// before a broker registered again must not remove the new registration.
func TestEpochRace(t *testing.T) {
	r, clk := newTestRegistry(t)
	g := reg("c1", "b1", 0, "10.0.0.1:1", "t")
	old := mustRegister(t, r, g)
	fresh := mustRegister(t, r, g) // the broker restarted and registered again
	if err := r.Unregister("c1", g.Addr, old.Epoch); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("late unregister: err = %v, want ErrStaleEpoch", err)
	}
	mustRoute(t, r, "t")

	// Expiry: the scan sees the lease due, the broker re-registers before
	// the removal, and the removal names the epoch it saw.
	clk.Advance(DefaultThreshold)
	due := func() []LeaseInfo {
		r.leaseMu.Lock()
		defer r.leaseMu.Unlock()
		return r.deadlines.due(r.read())
	}()
	if len(due) != 1 || due[0].Epoch != fresh.Epoch {
		t.Fatalf("due = %+v", due)
	}
	mustRegister(t, r, g)
	if removed := r.expire(due, r.read().ns); len(removed) != 0 {
		t.Fatalf("expiry removed a fresh registration: %+v", removed)
	}
	mustRoute(t, r, "t")
}

func TestExpiryAtDeadline(t *testing.T) {
	r, clk := newTestRegistry(t)
	short := reg("c1", "b1", 0, "10.0.0.1:1", "t")
	short.HeartbeatTimeout = 10 * time.Second
	mustRegister(t, r, short)
	mustRegister(t, r, reg("c1", "b2", 0, "10.0.0.2:1", "t"))

	clk.Advance(10*time.Second - time.Nanosecond)
	if got := r.ExpireDue(); len(got) != 0 {
		t.Fatalf("expired before the deadline: %+v", got)
	}
	clk.Advance(time.Nanosecond)
	got := r.ExpireDue()
	if len(got) != 1 || got[0].Addr != "10.0.0.1:1" {
		t.Fatalf("at the deadline expired %+v, want b1", got)
	}
	if q := mustRoute(t, r, "t").Queues; len(q) != 1 || q[0].BrokerName != "b2" {
		t.Fatalf("route after expiry = %+v", q)
	}
	if d, ok := r.NextDeadline(); !ok || !d.Equal(clk.Now().Add(DefaultThreshold-10*time.Second)) {
		t.Fatalf("next deadline = %v %v", d, ok)
	}
	clk.Advance(DefaultThreshold)
	if got := r.ExpireDue(); len(got) != 1 {
		t.Fatalf("expired %d, want 1", len(got))
	}
	if len(r.Topics()) != 0 || len(r.ClusterInfo().Clusters) != 0 {
		t.Fatal("registry not empty after every broker expired")
	}
}

type fixedThreshold time.Duration

func (f fixedThreshold) Threshold(LeaseInfo) time.Duration { return time.Duration(f) }

// holdAll keeps every due lease unless more than half would go
// (self-preservation in miniature).
type holdHalf struct{ calls int }

func (h *holdHalf) ConfirmExpiry(due []LeaseInfo, s ExpiryStats) []LeaseInfo {
	h.calls++
	if s.Due*2 > s.Leases {
		return nil
	}
	return append(due, LeaseInfo{Cluster: "c9", Addr: "10.9.9.9:1"}) // junk must be ignored
}

func TestExpiryPolicies(t *testing.T) {
	clk := newFakeClock()
	conf := &holdHalf{}
	r := New(Config{Clock: clk, Thresholds: fixedThreshold(5 * time.Second), Confirmer: conf})
	for i := range 4 {
		mustRegister(t, r, reg("c1", fmt.Sprintf("b%d", i), 0, fmt.Sprintf("10.0.0.%d:1", i), "t"))
	}
	clk.Advance(5 * time.Second)
	if got := r.ExpireDue(); len(got) != 0 {
		t.Fatalf("all 4 due: self-preservation should hold them, removed %d", len(got))
	}
	for i := range 3 {
		info := r.Leases()[i]
		if _, err := r.Heartbeat("c1", info.Addr, info.Epoch, info.DataVersion); err != nil {
			t.Fatal(err)
		}
	}
	got := r.ExpireDue()
	if len(got) != 1 || got[0].Addr != "10.0.0.3:1" {
		t.Fatalf("removed %+v, want only 10.0.0.3:1", got)
	}
	if conf.calls != 2 {
		t.Fatalf("confirmer called %d times", conf.calls)
	}
}

func TestDeleteTopic(t *testing.T) {
	r, _ := newTestRegistry(t)
	mustRegister(t, r, reg("c1", "b1", 0, "10.0.0.1:1", "t", "u"))
	mustRegister(t, r, reg("c2", "b2", 0, "10.0.0.2:1", "t"))
	cases := []struct {
		topic    string
		clusters []string
		want     error
		left     []string // brokers left on the topic; nil = topic gone
	}{
		{"t", []string{"nope"}, ErrClusterNotFound, []string{"b1", "b2"}},
		{"t", []string{"c1"}, nil, []string{"b2"}},
		{"t", []string{"c2"}, nil, nil},
		{"u", nil, nil, nil},
		{"u", nil, ErrTopicNotFound, nil},
	}
	for _, tc := range cases {
		err := r.DeleteTopic(tc.topic, tc.clusters...)
		if !errors.Is(err, tc.want) {
			t.Fatalf("DeleteTopic(%s, %v) = %v, want %v", tc.topic, tc.clusters, err, tc.want)
		}
		route, _, err := r.RouteData(tc.topic)
		if tc.left == nil {
			if !errors.Is(err, ErrTopicNotFound) {
				t.Fatalf("%s still routed after delete", tc.topic)
			}
			continue
		}
		var names []string
		for _, q := range route.Queues {
			names = append(names, q.BrokerName)
		}
		if !slices.Equal(names, tc.left) {
			t.Fatalf("after DeleteTopic(%s, %v): %v, want %v", tc.topic, tc.clusters, names, tc.left)
		}
	}
	checkInvariants(t, r)
}

func TestWritePerm(t *testing.T) {
	r, _ := newTestRegistry(t)
	g := reg("c1", "b1", 0, "10.0.0.1:1", "a", "b", "c")
	g.Topics[2].Perm = wire.PermRead // already read-only
	mustRegister(t, r, g)
	n, err := r.WipeWritePerm("b1")
	if err != nil || n != 2 {
		t.Fatalf("wipe = %d, %v; want 2 changed", n, err)
	}
	for _, name := range []string{"a", "b", "c"} {
		if p := mustRoute(t, r, name).Queues[0].Perm; p&wire.PermWrite != 0 {
			t.Fatalf("%s perm %d after wipe", name, p)
		}
	}
	if n, _ := r.WipeWritePerm("b1"); n != 0 {
		t.Fatalf("second wipe changed %d", n)
	}
	n, err = r.AddWritePerm("b1")
	if err != nil || n != 3 {
		t.Fatalf("add = %d, %v; want 3", n, err)
	}
	if p := mustRoute(t, r, "c").Queues[0].Perm; p != wire.PermRead|wire.PermWrite {
		t.Fatalf("perm after add = %d", p)
	}
	if _, err := r.WipeWritePerm("nope"); !errors.Is(err, ErrBrokerGroupNotFound) {
		t.Fatalf("unknown group: %v", err)
	}
}

func TestTopicLists(t *testing.T) {
	r, _ := newTestRegistry(t)
	g1 := reg("c1", "b1", 0, "10.0.0.1:1", "plain", "unit", "unitsub", "both", "rmq_sys_x", "TBW102")
	g1.Topics[1].SysFlag = wire.SysFlagUnit
	g1.Topics[2].SysFlag = wire.SysFlagUnitSub
	g1.Topics[3].SysFlag = wire.SysFlagUnit | wire.SysFlagUnitSub
	mustRegister(t, r, g1)
	mustRegister(t, r, reg("c2", "b2", 0, "10.0.0.2:1", "other"))

	byCluster, err := r.TopicsByCluster("c2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.TopicsByCluster("none"); !errors.Is(err, ErrClusterNotFound) {
		t.Fatalf("unknown cluster: %v", err)
	}
	cases := []struct {
		name string
		got  []string
		want []string
	}{
		{"all", r.Topics(), []string{"TBW102", "both", "other", "plain", "rmq_sys_x", "unit", "unitsub"}},
		{"by cluster", byCluster, []string{"other"}},
		{"system", r.SystemTopics(), []string{"TBW102", "b1", "b2", "c1", "c2", "rmq_sys_x"}},
		{"unit", r.UnitTopics(), []string{"both", "unit"}},
		{"unit sub", r.UnitSubTopics(), []string{"both", "unitsub"}},
		{"unit sub not unit", r.UnitSubNonUnitTopics(), []string{"unitsub"}},
	}
	for _, tc := range cases {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestClusterInfoAndMemberGroup(t *testing.T) {
	r, _ := newTestRegistry(t)
	mustRegister(t, r, reg("c1", "b1", 0, "10.0.0.1:1", "t"))
	mustRegister(t, r, reg("c1", "b1", 1, "10.0.0.2:1"))
	mustRegister(t, r, reg("c1", "b2", 0, "10.0.0.3:1", "t"))
	info := r.ClusterInfo()
	if !slices.Equal(info.Clusters["c1"], []string{"b1", "b2"}) || len(info.Groups["b1"].Addrs) != 2 {
		t.Fatalf("cluster info = %+v", info)
	}
	bd, err := r.BrokerMemberGroup("c1", "b1")
	if err != nil || bd.Addrs[1] != "10.0.0.2:1" {
		t.Fatalf("member group = %+v, %v", bd, err)
	}
	if _, err := r.BrokerMemberGroup("c2", "b1"); !errors.Is(err, ErrBrokerGroupNotFound) {
		t.Fatalf("wrong cluster: %v", err)
	}
}

func TestRouteCache(t *testing.T) {
	var changed [][]string
	r := New(Config{Clock: newFakeClock(), OnChange: func(ts []string) { changed = append(changed, ts) }})
	g := reg("c1", "b1", 0, "10.0.0.1:1", "a", "b")
	mustRegister(t, r, g)
	ea, _ := r.Route("a")
	eb, _ := r.Route("b")
	if again, _ := r.Route("a"); again != ea {
		t.Fatal("an unchanged route was rebuilt")
	}
	if ea.Version == eb.Version && string(ea.Body) == string(eb.Body) {
		// same content gives same version; both topics have equal routes
	} else {
		t.Fatal("equal routes must have equal bytes and versions")
	}
	g.Topics[0].ReadQueues = 2
	g.DataVersion.Counter++
	mustRegister(t, r, g)
	na, _ := r.Route("a")
	nb, _ := r.Route("b")
	if na == ea || na.Version == ea.Version {
		t.Fatal("changed route a kept its version")
	}
	if nb != eb {
		t.Fatal("unchanged route b was invalidated")
	}
	if last := changed[len(changed)-1]; !slices.Equal(last, []string{"a"}) {
		t.Fatalf("OnChange last = %v, want [a]", last)
	}
	allocs := testing.AllocsPerRun(100, func() { _, _ = r.Route("a") })
	if allocs != 0 {
		t.Fatalf("cached route lookup allocates %.1f times", allocs)
	}
}

// checkInvariants verifies what must hold after any sequence of operations:
// every route names existing groups, every group has a cluster and members,
// every member has a lease, and every lease belongs to a member.
func checkInvariants(t testing.TB, r *Registry) {
	t.Helper()
	r.mu.RLock()
	defer r.mu.RUnlock()
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	for name, tp := range r.topics {
		if len(tp.queues) == 0 {
			t.Errorf("topic %s has no queue data", name)
		}
		for _, q := range tp.queues {
			if r.groups[q.group.name] != q.group {
				t.Errorf("topic %s names group %s that does not exist", name, q.group.name)
			}
			if _, ok := q.group.topics[tp]; !ok {
				t.Errorf("group %s does not know topic %s", q.group.name, name)
			}
		}
	}
	for name, g := range r.groups {
		c := r.clusters[g.cluster]
		if c == nil || c.groups[name] != g {
			t.Errorf("group %s has no cluster %s", name, g.cluster)
		}
		if len(g.addrs) == 0 {
			t.Errorf("group %s is empty", name)
		}
		for tp := range g.topics {
			if r.topics[tp.name] != tp {
				t.Errorf("group %s holds deleted topic %s", name, tp.name)
			}
			if _, gone := g.deleted[tp.name]; gone {
				t.Errorf("group %s serves topic %s and holds its tombstone", name, tp.name)
			}
		}
	}
	for name, g := range r.groups {
		for id, addr := range g.addrs {
			l := r.leases[leaseKey{g.cluster, addr}]
			if l == nil || l.brokerName != name || l.brokerID != id {
				t.Errorf("member %d %s of group %s has no lease of its own (lease %+v)", id, addr, name, l)
			}
		}
	}
	for key, l := range r.leases {
		g := r.groups[l.brokerName]
		if g == nil || g.addrs[l.brokerID] != key.addr {
			t.Errorf("lease %v is not a member of %s", key, l.brokerName)
		}
		if r.deadlines[l.heapIdx].l != l {
			t.Errorf("lease %v is not at its heap index", key)
		}
	}
	if len(r.deadlines) != len(r.leases) {
		t.Errorf("%d heap entries for %d leases", len(r.deadlines), len(r.leases))
	}
	for i := 1; i < len(r.deadlines); i++ {
		if r.deadlines[(i-1)/2].deadline > r.deadlines[i].deadline {
			t.Errorf("heap order broken at %d", i)
		}
	}
}

// TestIsSystemTopicMatchesTopicValidator checks IsSystemTopic against
// RocketMQ 5.3's TopicValidator.SYSTEM_TOPIC_SET and its rmq_sys_ prefix:
// a 5.3 broker that keeps transactions or offsets in RocksDB registers
// CHECKPOINT_TOPIC and the RMQ_SYS_ROCKSDB_TRANS_* topics, which
// getSystemTopicList lists with the others.
func TestIsSystemTopicMatchesTopicValidator(t *testing.T) {
	for _, name := range []string{
		"TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
		"RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
		"SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC",
		"RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC", "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC",
		"rmq_sys_SYNC_BROKER_MEMBER_b1", "rmq_sys_wheel_timer",
	} {
		if !IsSystemTopic(name) {
			t.Errorf("IsSystemTopic(%q) = false, want true (TopicValidator.isSystemTopic)", name)
		}
	}
	for _, name := range []string{"orders", "checkpoint_topic", "RMQ_SYS_", "%RETRY%g", "%DLQ%g", "Rmq_sys_x"} {
		if IsSystemTopic(name) {
			t.Errorf("IsSystemTopic(%q) = true, want false", name)
		}
	}
}
