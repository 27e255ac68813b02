package registry

import (
	"errors"
	"fmt"
	"testing"

	"github.com/edgereg/edgereg/wire"
)

// TestAddressMovesToAnotherGroup: an address re-registered under another
// broker name leaves its old group. Before the fix the old group kept the
// address with no lease behind it, and its routes were served forever.
func TestAddressMovesToAnotherGroup(t *testing.T) {
	r, clk := newTestRegistry(t)
	mustRegister(t, r, reg("c1", "ga", 0, "10.0.0.1:1", "ta"))
	mustRegister(t, r, reg("c1", "gb", 0, "10.0.0.1:1", "tb"))
	checkInvariants(t, r)
	if _, err := r.Route("ta"); !errors.Is(err, ErrTopicNotFound) {
		t.Errorf("the old group's topic is still routed after its only address moved: %v", err)
	}
	if _, ok := r.ClusterInfo().Groups["ga"]; ok {
		t.Error("the old group, left without members, still exists")
	}
	if a := mustRoute(t, r, "tb").Brokers[0].Addrs; fmt.Sprint(a) != "map[0:10.0.0.1:1]" {
		t.Errorf("new group's addrs = %v", a)
	}
	// Every broker expires: nothing is left behind.
	clk.Advance(DefaultThreshold)
	r.ExpireDue()
	if ts := r.Topics(); len(ts) != 0 {
		t.Errorf("topics left after every lease expired: %v", ts)
	}
	checkInvariants(t, r)
}

// TestMasterAddressMovesOut: the master's address moves to another group;
// the old group keeps its slave, read-only, as when its master goes away.
func TestMasterAddressMovesOut(t *testing.T) {
	r, _ := newTestRegistry(t)
	mustRegister(t, r, reg("c1", "ga", 0, "10.0.0.1:1", "t"))
	mustRegister(t, r, reg("c1", "ga", 1, "10.0.0.2:1", "t"))
	mustRegister(t, r, reg("c1", "gb", 0, "10.0.0.1:1", "u"))
	checkInvariants(t, r)
	route := mustRoute(t, r, "t")
	if a := route.Brokers[0].Addrs; fmt.Sprint(a) != "map[1:10.0.0.2:1]" {
		t.Errorf("old group's addrs = %v, want its slave only", a)
	}
	if route.Queues[0].Perm&wire.PermWrite != 0 {
		t.Errorf("old group's queues stay writable without a master: perm %d", route.Queues[0].Perm)
	}
}

// TestPrimeSlaveKeepsTopicsReadable is RocketMQ 5's isPrimeSlave: when a
// group has no master, its lowest-id slave's topics are served read-only,
// whether or not the broker asked for acting master (which only decides
// whether the slave is shown as id 0).
func TestPrimeSlaveKeepsTopicsReadable(t *testing.T) {
	r, _ := newTestRegistry(t)
	m := mustRegister(t, r, reg("c1", "b1", 0, "10.0.0.1:1", "t"))
	mustRegister(t, r, reg("c1", "b1", 1, "10.0.0.2:1", "t"))
	if err := r.Unregister("c1", "10.0.0.1:1", m.Epoch); err != nil {
		t.Fatal(err)
	}
	route := mustRoute(t, r, "t")
	if route.Queues[0].Perm != wire.PermRead {
		t.Errorf("perm %d after the master left, want read-only", route.Queues[0].Perm)
	}
	if a := route.Brokers[0].Addrs; fmt.Sprint(a) != "map[1:10.0.0.2:1]" {
		t.Errorf("addrs = %v", a)
	}

	// After a node restart the slave registers first: its topics are read.
	r2, _ := newTestRegistry(t)
	mustRegister(t, r2, reg("c1", "b1", 1, "10.0.0.2:1", "t"))
	if p := mustRoute(t, r2, "t").Queues[0].Perm; p != wire.PermRead {
		t.Errorf("prime slave's topic perm %d, want read-only", p)
	}
	// A slave that is not the lowest id is not read.
	mustRegister(t, r2, reg("c1", "b1", 2, "10.0.0.3:1", "t", "from-second-slave"))
	if _, err := r2.Route("from-second-slave"); !errors.Is(err, ErrTopicNotFound) {
		t.Errorf("a non-prime slave's topic was accepted: %v", err)
	}
	// The master returns: its topic set is authoritative and writable.
	mustRegister(t, r2, reg("c1", "b1", 0, "10.0.0.1:1", "t"))
	if p := mustRoute(t, r2, "t").Queues[0].Perm; p != wire.PermRead|wire.PermWrite {
		t.Errorf("perm %d after the master came back", p)
	}
	checkInvariants(t, r2)
}
