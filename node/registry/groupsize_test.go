package registry

import (
	"errors"
	"fmt"
	"testing"
)

// TestBrokersPerGroupBounded: a broker credential for group A could
// register any number of broker ids in A (an outside probe registered 300,
// and each member of a group with 200,000 topics made every registration of
// the group 50-150 ms of registry work). A group holds at most
// MaxBrokersPerGroup ids; one more is refused as a conflict, naming the
// cap, while the members it has keep re-registering and may change address.
func TestBrokersPerGroupBounded(t *testing.T) {
	r, _ := newTestRegistry(t)
	addr := func(id int) string { return fmt.Sprintf("10.9.%d.%d:10911", id/250, id%250) }
	for id := range MaxBrokersPerGroup {
		mustRegister(t, r, reg("c1", "big", int64(id), addr(id), "t"))
	}
	_, err := r.Register(reg("c1", "big", MaxBrokersPerGroup, addr(MaxBrokersPerGroup), "t"))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("broker id %d of a group of %d: %v, want a conflict", MaxBrokersPerGroup, MaxBrokersPerGroup, err)
	}
	// Members already in the group are not affected.
	mustRegister(t, r, reg("c1", "big", 1, addr(1), "t", "t2"))
	mustRegister(t, r, reg("c1", "big", 2, "10.8.0.2:10911", "t")) // id 2 moves address
	// Another group is not affected either.
	mustRegister(t, r, reg("c1", "small", 0, "10.7.0.1:10911", "t"))
	bd, err := r.BrokerMemberGroup("c1", "big")
	if err != nil {
		t.Fatal(err)
	}
	if len(bd.Addrs) != MaxBrokersPerGroup {
		t.Fatalf("group holds %d ids, want %d", len(bd.Addrs), MaxBrokersPerGroup)
	}
}
