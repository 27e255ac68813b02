package routeclient_test

import (
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/routeclient"
)

// TestDeadNodeBacksOffWhileAnotherAnswers: two nodes listed, one dead (a
// black hole), the default fanout of 2. Twelve refreshes one after
// another, each after the last dial of the dead node has failed, are
// answered by the live node; the dead one, backing off for a minute after
// its first failure, is not dialled again. Before, every refresh dialled
// it (13 dials in 13 reads): a query always asked min(Fanout, nodes) nodes, whatever
// their backoff. node/simtest TestDeadNodeIsNotHammered measures the same
// over 15 virtual minutes.
func TestDeadNodeBacksOffWhileAnotherAnswers(t *testing.T) {
	ca := newTestCA(t)
	live := startNode(t, ca, nil)
	register(t, live, "b1", "10.0.0.1:10911", 4, "orders")
	dead := newBlackhole(t)
	c := newClient(t, ca, nodes.Static(live.Addr(), dead.addr()), func(cfg *routeclient.Config) {
		cfg.RequestTimeout = 200 * time.Millisecond
		cfg.Backoff = nodes.Backoff{Min: time.Minute, Max: time.Minute}
	})
	if _, _, err := c.Route(ctxT(t), "orders"); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		time.Sleep(250 * time.Millisecond) // the dial in flight has failed by now
		if err := c.Refresh(ctxT(t)); err != nil {
			t.Fatalf("refresh %d with one node alive: %v", i, err)
		}
	}
	if n := dead.dials(); n > 2 {
		t.Errorf("the dead node was dialled %d times in 13 reads, want 1 (2 at most): its backoff was ignored", n)
	}
}
