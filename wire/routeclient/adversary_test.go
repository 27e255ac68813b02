package routeclient_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
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

// blackhole is a UDP socket that answers nothing, as a node behind a
// partition or a dead host whose packets are dropped; it counts the dials
// it saw (each dial of the client binds a socket of its own, so a new
// source address is a new dial).
type blackhole struct {
	conn  *net.UDPConn
	mu    sync.Mutex
	peers map[string]bool
	done  chan struct{}
}

func newBlackhole(t *testing.T) *blackhole {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{conn: conn, peers: make(map[string]bool), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		buf := make([]byte, 2048)
		for {
			_, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			b.mu.Lock()
			b.peers[from.String()] = true
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close(); <-b.done })
	return b
}

func (b *blackhole) addr() string { return b.conn.LocalAddr().String() }

func (b *blackhole) dials() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.peers)
}

// TestDeadNodeIsDialledOnceByConcurrentReads: reads that queue for a
// node's connection while another read dials it share that dial's
// failure. Before, each waiter dialled the dead node again in turn as the
// one before it gave up: 8 reads, 8 dials one after another, the last
// read waiting 8 request timeouts for a node that was known dead after
// the first.
func TestDeadNodeIsDialledOnceByConcurrentReads(t *testing.T) {
	ca := newTestCA(t)
	dead := newBlackhole(t)
	c := newClient(t, ca, nodes.Static(dead.addr()), func(cfg *routeclient.Config) {
		cfg.RequestTimeout = time.Second
		cfg.Backoff = nodes.Backoff{Min: time.Minute, Max: time.Minute}
	})
	const reads = 8
	var wg sync.WaitGroup
	errs := make(chan error, reads)
	for i := range reads {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
			defer cancel()
			_, _, err := c.Route(ctx, fmt.Sprintf("topic-%d", i))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err == nil {
			t.Error("a read of a dead node succeeded")
		}
	}
	if n := dead.dials(); n > 2 {
		t.Errorf("%d concurrent reads dialled the dead node %d times, want 1 (2 at most, for a read scheduled after the first dial failed)", reads, n)
	}
}
