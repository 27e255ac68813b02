package routeclient_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/routeclient"
)

// longTopic is a valid topic name of 127 characters, the longest allowed.
func longTopic(i int) string {
	s := fmt.Sprintf("t%d-", i)
	return s + strings.Repeat("x", 127-len(s))
}

// TestWatchOfManyLongTopicsIsSplitBySize: a watch of 9,000 topics with
// names of 127 characters is over 1 MiB in one request, the node's cap on
// a client's frame. The client must split its watch requests by size, as
// Refresh does, not only by count; one request for all of them is refused
// by every node on every retry, and the watch never delivers anything.
func TestWatchOfManyLongTopicsIsSplitBySize(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	c := newClient(t, ca, nodes.Static(tn.Addr()), nil)
	topics := make([]string, 9000)
	for i := range topics {
		topics[i] = longTopic(i)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch, err := c.Watch(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a watch stream", func() bool { return c.Stats().WatchStreams >= 1 })
	last := topics[len(topics)-1]
	// Registered after the watch is made: only a push can bring it.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		register(t, tn, "b1", "10.0.0.1:10911", 4, last)
		select {
		case u := <-ch:
			if u.Topic != last || u.Gone {
				t.Fatalf("update %+v, want %s's route", u, last)
			}
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	t.Fatalf("no update for a watched topic in 20 s (%d watch streams opened)", c.Stats().WatchStreams)
}

var _ = routeclient.Update{}
