package registry

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// Re-registrations: a broker re-sends its full registration whenever its
// data version changes, mostly with the same topics. applyTopics then
// changes nothing (sameTopics); these tests pin down that such a
// registration still renews the lease and that every real change is still
// applied.

type changeLog struct{ calls [][]string }

func (c *changeLog) record(ts []string) { c.calls = append(c.calls, slices.Sorted(slices.Values(ts))) }

func (c *changeLog) take() [][]string { out := c.calls; c.calls = nil; return out }

func newLoggedRegistry(t *testing.T) (*Registry, *fakeClock, *changeLog) {
	t.Helper()
	clk, log := newFakeClock(), &changeLog{}
	return New(Config{Clock: clk, OnChange: log.record}), clk, log
}

// resend returns rg with a new data version and a deep copy of its topics
// (names in memory of their own, as every decoded request has).
func resend(rg Registration) Registration {
	rg.DataVersion.Counter++
	rg.Topics = slices.Clone(rg.Topics)
	for i := range rg.Topics {
		rg.Topics[i].Name = strings.Clone(rg.Topics[i].Name)
	}
	return rg
}

func routes(t *testing.T, r *Registry, names ...string) map[string]*EncodedRoute {
	t.Helper()
	out := make(map[string]*EncodedRoute)
	for _, n := range names {
		e, err := r.Route(n)
		if err != nil {
			t.Fatalf("Route(%s): %v", n, err)
		}
		out[n] = e
	}
	return out
}

func TestIdenticalRegistrationChangesNothing(t *testing.T) {
	r, clk, log := newLoggedRegistry(t)
	rg := reg("c1", "b1", 0, "10.0.0.1:1", "a", "b", "c")
	first := mustRegister(t, r, rg)
	before := routes(t, r, "a", "b", "c")
	log.take()

	clk.Advance(10 * time.Second)
	rg = resend(rg)
	res := mustRegister(t, r, rg)

	if calls := log.take(); len(calls) != 0 {
		t.Errorf("OnChange called with %v, want no call", calls)
	}
	after := routes(t, r, "a", "b", "c")
	for n, e := range before {
		if after[n] != e { // the very same cached route: nothing was invalidated
			t.Errorf("topic %s: route cache rebuilt (version %x -> %x)", n, e.Version, after[n].Version)
		}
	}
	if res.Epoch == first.Epoch {
		t.Errorf("epoch %d not renewed", res.Epoch)
	}
	if !res.Deadline.After(first.Deadline) {
		t.Errorf("deadline %v not moved past %v", res.Deadline, first.Deadline)
	}
	l, _ := r.Lease("c1", "10.0.0.1:1")
	if l.DataVersion != rg.DataVersion || l.Epoch != res.Epoch {
		t.Errorf("lease holds version %+v epoch %d, want %+v epoch %d", l.DataVersion, l.Epoch, rg.DataVersion, res.Epoch)
	}
	checkInvariants(t, r)
}

func TestReregistrationChangesOneTopic(t *testing.T) {
	r, _, log := newLoggedRegistry(t)
	rg := reg("c1", "b1", 0, "10.0.0.1:1", "a", "b", "c")
	mustRegister(t, r, rg)
	rg = resend(rg)
	mustRegister(t, r, rg) // the shortcut is primed
	before := routes(t, r, "a", "b", "c")
	log.take()

	rg = resend(rg)
	rg.Topics[1].WriteQueues = 3
	mustRegister(t, r, rg)

	if calls := log.take(); !slices.EqualFunc(calls, [][]string{{"b"}}, slices.Equal) {
		t.Errorf("OnChange calls %v, want [[b]]", calls)
	}
	after := routes(t, r, "a", "b", "c")
	if after["a"] != before["a"] || after["c"] != before["c"] {
		t.Error("an unchanged topic's route was rebuilt")
	}
	if after["b"].Version == before["b"].Version {
		t.Error("the changed topic kept its version")
	}
	if got := mustRoute(t, r, "b").Queues[0].WriteQueues; got != 3 {
		t.Errorf("b has %d write queues, want 3", got)
	}
	checkInvariants(t, r)
}

func TestReregistrationDropsTopic(t *testing.T) {
	r, _, log := newLoggedRegistry(t)
	rg := reg("c1", "b1", 0, "10.0.0.1:1", "a", "b", "c")
	mustRegister(t, r, rg)
	rg = resend(rg)
	mustRegister(t, r, rg)
	log.take()

	rg = resend(rg)
	rg.Topics = slices.Delete(rg.Topics, 1, 2)
	mustRegister(t, r, rg)

	if calls := log.take(); !slices.EqualFunc(calls, [][]string{{"b"}}, slices.Equal) {
		t.Errorf("OnChange calls %v, want [[b]]", calls)
	}
	if _, err := r.Route("b"); err == nil {
		t.Error("dropped topic b still has a route")
	}
	// The same shorter list again changes nothing.
	rg = resend(rg)
	mustRegister(t, r, rg)
	if calls := log.take(); len(calls) != 0 {
		t.Errorf("OnChange calls %v after an identical registration", calls)
	}
	checkInvariants(t, r)
}

// TestReregistrationAfterOtherWriters: what updates, deletions and
// permission edits changed since the last full registration is still
// undone or kept as a full registration would, shortcut or not.
func TestReregistrationAfterOtherWriters(t *testing.T) {
	r, _, log := newLoggedRegistry(t)
	rg := reg("c1", "b1", 0, "10.0.0.1:1", "a", "b")
	mustRegister(t, r, rg)
	rg = resend(rg)
	res := mustRegister(t, r, rg)

	// An update added d and changed b: the full list drops d, restores b.
	bBefore := mustRoute(t, r, "b")
	if _, err := r.UpdateTopics(TopicUpdate{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: res.Epoch,
		Upsert: []wire.TopicConfig{{Name: "d", ReadQueues: 1}, {Name: "b", ReadQueues: 1}}}); err != nil {
		t.Fatal(err)
	}
	log.take()
	rg = resend(rg)
	mustRegister(t, r, rg)
	if calls := log.take(); !slices.EqualFunc(calls, [][]string{{"b", "d"}}, slices.Equal) {
		t.Errorf("after an update: OnChange calls %v, want [[b d]]", calls)
	}
	if _, err := r.Route("d"); err == nil {
		t.Error("d, not in the full list, survived")
	}
	if got := mustRoute(t, r, "b"); got.Queues[0] != bBefore.Queues[0] {
		t.Errorf("b is %+v, want %+v", got.Queues[0], bBefore.Queues[0])
	}

	// Write permission wiped by an operator: a full registration with a
	// new data version restores it, as it always did.
	if _, err := r.WipeWritePerm("b1"); err != nil {
		t.Fatal(err)
	}
	log.take()
	rg = resend(rg)
	mustRegister(t, r, rg)
	if calls := log.take(); !slices.EqualFunc(calls, [][]string{{"a", "b"}}, slices.Equal) {
		t.Errorf("after a wipe: OnChange calls %v, want [[a b]]", calls)
	}
	if p := mustRoute(t, r, "a").Queues[0].Perm; p&wire.PermWrite == 0 {
		t.Errorf("a has perm %d after re-registration", p)
	}

	// A deleted topic stays deleted while the broker still names it.
	if err := r.DeleteTopic("a"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		rg = resend(rg)
		mustRegister(t, r, rg)
		if _, err := r.Route("a"); err == nil {
			t.Fatal("deleted topic a came back")
		}
	}
	checkInvariants(t, r)
}

// TestShortcutEquivalence applies the same random operations to a
// registry with the sameTopics shortcut and one without, and compares
// every route and what OnChange reported after each step (the shortcut
// may only leave out reports of routes that did not change).
func TestShortcutEquivalence(t *testing.T) {
	fast, _, fastLog := newLoggedRegistry(t)
	slow, _, slowLog := newLoggedRegistry(t)
	slow.alwaysApply = true
	regs := []*Registry{fast, slow}
	rng := rand.New(rand.NewPCG(7, 8))
	type broker struct {
		rg    Registration
		epoch uint64
	}
	var brokers []*broker
	for g := range 3 {
		for id := range int64(2) {
			rg := reg("c1", fmt.Sprintf("g%d", g), id, fmt.Sprintf("10.0.%d.%d:1", g, id), "t0", "t1", "t2", "t3")
			brokers = append(brokers, &broker{rg: rg})
		}
	}
	randomTopics := func() []wire.TopicConfig {
		var out []wire.TopicConfig
		for i := range 6 {
			if rng.IntN(3) > 0 {
				out = append(out, wire.TopicConfig{Name: fmt.Sprintf("t%d", i), ReadQueues: uint32(1 + rng.IntN(2)), WriteQueues: 8, Perm: 6})
			}
		}
		return out
	}
	for step := range 3000 {
		b := brokers[rng.IntN(len(brokers))]
		op, upsert, name := rng.IntN(10), randomTopics(), fmt.Sprintf("t%d", rng.IntN(6))
		var errs [2]error
		for i, r := range regs {
			switch op {
			case 0, 1, 2, 3, 4:
				res, err := r.Register(b.rg)
				errs[i] = err
				if i == 1 && err == nil {
					b.epoch = res.Epoch // epochs are the clock's: the same in both
				}
			case 5:
				if len(upsert) > 1 {
					upsert = upsert[:1]
				}
				_, errs[i] = r.UpdateTopics(TopicUpdate{Cluster: "c1", Addr: b.rg.Addr, Epoch: b.epoch,
					Upsert: upsert, Remove: []string{name}})
			case 6:
				errs[i] = r.Unregister("c1", b.rg.Addr, b.epoch)
			case 7:
				_, errs[i] = r.WipeWritePerm(b.rg.BrokerName)
			case 8:
				errs[i] = r.DeleteTopic(name)
			case 9:
				_, errs[i] = r.AddWritePerm(b.rg.BrokerName)
			}
		}
		if (errs[0] == nil) != (errs[1] == nil) {
			t.Fatalf("step %d (op %d): errors differ: %v / %v", step, op, errs[0], errs[1])
		}
		compareRegistries(t, step, fast, slow)
		fastChanged, slowChanged := flatten(fastLog.take()), flatten(slowLog.take())
		for _, n := range fastChanged {
			if !slices.Contains(slowChanged, n) {
				t.Fatalf("step %d: %s reported changed with the shortcut only", step, n)
			}
		}
		// Next time: the same topics again (the usual re-registration),
		// or other ones.
		b.rg = resend(b.rg)
		if rng.IntN(3) == 0 {
			b.rg.Topics = randomTopics()
		}
	}
	checkInvariants(t, fast)
}

func flatten(calls [][]string) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c...)
	}
	return out
}

func compareRegistries(t *testing.T, step int, a, b *Registry) {
	t.Helper()
	ta, tb := a.Topics(), b.Topics()
	if !slices.Equal(ta, tb) {
		t.Fatalf("step %d: topics %v / %v", step, ta, tb)
	}
	for _, n := range ta {
		ea, _ := a.Route(n)
		eb, _ := b.Route(n)
		if ea.Version != eb.Version {
			t.Fatalf("step %d: topic %s: routes differ", step, n)
		}
	}
}

// TestLeaseThreshold: the Lease a registration, an update and a heartbeat
// return carries the threshold LeaseInfo shows, the broker's request
// clamped, so the node answers without a second lookup.
func TestLeaseThreshold(t *testing.T) {
	r, _ := newTestRegistry(t)
	rg := reg("c1", "b1", 0, "10.0.0.1:1", "a")
	rg.HeartbeatTimeout = time.Hour // above DefaultMaxThreshold
	res := mustRegister(t, r, rg)
	up, err := r.UpdateTopics(TopicUpdate{Cluster: "c1", Addr: rg.Addr, Epoch: res.Epoch, Upsert: topics("b")})
	if err != nil {
		t.Fatal(err)
	}
	hb, err := r.Heartbeat("c1", rg.Addr, res.Epoch, rg.DataVersion)
	if err != nil {
		t.Fatal(err)
	}
	li, _ := r.Lease("c1", rg.Addr)
	if li.Threshold != DefaultMaxThreshold {
		t.Fatalf("LeaseInfo.Threshold %s, want %s", li.Threshold, DefaultMaxThreshold)
	}
	for name, l := range map[string]Lease{"register": res.Lease, "update": up, "heartbeat": hb} {
		if l.Threshold != li.Threshold {
			t.Errorf("%s: Lease.Threshold %s, want %s", name, l.Threshold, li.Threshold)
		}
	}
}
