package node

import (
	"slices"
	"testing"

	"github.com/edgereg/edgereg/wire"
)

func filteredRouteBody(t *testing.T, groups ...string) []byte {
	t.Helper()
	var r wire.Route
	for _, g := range groups {
		r.Queues = append(r.Queues, wire.QueueData{BrokerName: g, ReadQueues: 4, WriteQueues: 4, Perm: 6})
	}
	b, err := wire.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFilteredGroups: the cache answers what decoding the route gives,
// never an earlier body's groups for the same version, and stays bounded.
func TestFilteredGroups(t *testing.T) {
	c := newFilteredGroups()
	a, b := filteredRouteBody(t, "g1", "g2"), filteredRouteBody(t, "g3")
	if got := c.groups(7, a); !slices.Equal(got, []string{"g1", "g2"}) {
		t.Fatalf("first read: %v", got)
	}
	if got := c.groups(7, a); !slices.Equal(got, []string{"g1", "g2"}) {
		t.Fatalf("cached read: %v", got)
	}
	// Another body under the same version (a policy whose output changed,
	// or a collision): its own groups, not the cached ones.
	if got := c.groups(7, b); !slices.Equal(got, []string{"g3"}) {
		t.Fatalf("same version, other body: %v", got)
	}
	// The cache keeps its own copy of the body: a caller reusing its
	// buffer cannot change what an entry was computed from.
	buf := slices.Clone(a)
	c.groups(8, buf)
	copy(buf, b)
	if got := c.groups(8, a); !slices.Equal(got, []string{"g1", "g2"}) {
		t.Fatalf("after the caller reused its buffer: %v", got)
	}
	for v := range uint64(3 * maxFilteredGroups) {
		c.groups(100+v, a)
	}
	if n := len(c.cur) + len(c.prev); n > 2*maxFilteredGroups {
		t.Fatalf("%d entries, want at most %d", n, 2*maxFilteredGroups)
	}
	if got := testing.AllocsPerRun(100, func() { c.groups(7, b) }); got != 0 {
		t.Fatalf("a cached read allocates %v times", got)
	}
}
