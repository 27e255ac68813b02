package routeclient_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire/lossyudp"
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
	// The deadlines here are only against a hang: under -race on a loaded
	// machine a watch request of thousands of long topics took the node
	// longer than the default 3 s request timeout, and the client gave it
	// up and sent it again on a new stream, over and over (6 streams, no
	// update in 20 s).
	c := newClient(t, ca, nodes.Static(tn.Addr()), func(cfg *routeclient.Config) { cfg.RequestTimeout = time.Minute })
	topics := make([]string, 9000)
	for i := range topics {
		topics[i] = longTopic(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ch, err := c.Watch(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a watch stream", func() bool { return c.Stats().WatchStreams >= 1 })
	last := topics[len(topics)-1]
	// Registered after the watch is made: only a push can bring it.
	deadline := time.Now().Add(2 * time.Minute)
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
	t.Fatalf("no update for a watched topic in 2 min (%d watch streams opened)", c.Stats().WatchStreams)
}

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

// TestWatchChurnAndCloseDuringDelivery: many watches on one client (one
// stream per node), some cancelled while routes change and events are in
// flight, some never read, then Close from another goroutine in the middle
// of deliveries: every channel closes, Close returns, and nothing is left
// running (goleak in TestMain). The watches still read get the final
// version of their topics before that.
func TestWatchChurnAndCloseDuringDelivery(t *testing.T) {
	ca := newTestCA(t)
	tns := sortedNodes(t, ca, 2, nil)
	const topics = 200
	names := make([]string, topics)
	for i := range names {
		names[i] = fmt.Sprintf("churn-%d", i)
	}
	for _, tn := range tns {
		register(t, tn, "b1", "10.0.0.1:10911", 1, names...)
	}
	c := newClient(t, ca, nodes.Static(addrsOf(tns)...), nil)
	ctx := ctxT(t)
	type watch struct {
		ch     <-chan routeclient.Update
		cancel context.CancelFunc
	}
	var ws []watch
	for i := range 40 {
		wctx, cancel := context.WithCancel(ctx)
		ch, err := c.Watch(wctx, names[i*4:i*4+20]...)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, watch{ch, cancel})
	}
	// A reader of every even watch; odd ones are never read.
	var readers sync.WaitGroup
	var mu sync.Mutex
	final := make([]map[string]uint32, len(ws))
	for i := 0; i < len(ws); i += 2 {
		final[i] = make(map[string]uint32)
		readers.Go(func() {
			for u := range ws[i].ch {
				mu.Lock()
				final[i][u.Topic] = writeQueues(u)
				mu.Unlock()
			}
		})
	}
	// Routes change on both nodes while some watches go away.
	cancelled := make([]bool, len(ws))
	for round := uint32(2); round <= 6; round++ {
		for _, tn := range tns {
			register(t, tn, "b1", "10.0.0.1:10911", round, names...)
		}
		for i := int(round); i < len(ws); i += 6 {
			ws[i].cancel()
			cancelled[i] = true
		}
	}
	// The read watches still open see the final version of every topic.
	waitFor(t, "every open read watch to get the final routes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i < len(ws); i += 2 {
			if cancelled[i] {
				continue
			}
			for _, name := range names[i*4 : i*4+20] {
				if final[i][name] != 6 {
					return false
				}
			}
		}
		return true
	})
	// More changes, and Close in the middle of their deliveries.
	for _, tn := range tns {
		register(t, tn, "b1", "10.0.0.1:10911", 7, names...)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		w.cancel()
		for range w.ch {
		}
	}
	readers.Wait()
}

// TestWarmingNodesRouteIsNotServedAlone: a node that restarted and is
// warming up holds only the brokers that re-registered so far (b1; b2 has
// not yet), and the other node asked does not answer. The warming node's
// route proves nothing about what it lacks (PROTOCOL.md 9), so the read
// must not return it on MergeWait as if the merge were done: it goes on to
// the next node, which holds b1 and b2. Before, the read returned the
// warming node's half route 50 ms after its answer.
func TestWarmingNodesRouteIsNotServedAlone(t *testing.T) {
	ca := newTestCA(t)
	warming := startNode(t, ca, func(cfg *node.Config) { cfg.WarmUp = time.Hour })
	// The node list is sorted by address: the ready node must come last,
	// after the warming node and the silent one.
	var ready *testNode
	for range 20 {
		if ready = startNode(t, ca, nil); ready.Addr() > warming.Addr() {
			break
		}
	}
	var silent *blackhole
	for range 50 {
		if silent = newBlackhole(t); silent.addr() < ready.Addr() {
			break
		}
	}
	if ready.Addr() < warming.Addr() || silent.addr() > ready.Addr() {
		t.Skip("could not order the addresses") // 20 and 50 tries of a coin toss
	}
	register(t, warming, "b1", "10.0.0.1:10911", 4, "orders")
	register(t, ready, "b1", "10.0.0.1:10911", 4, "orders")
	register(t, ready, "b2", "10.0.0.2:10911", 4, "orders")
	c := newClient(t, ca, nodes.Static(warming.Addr(), silent.addr(), ready.Addr()), func(cfg *routeclient.Config) {
		cfg.RequestTimeout = time.Second
	})
	route, _, err := c.Route(ctxT(t), "orders")
	if err != nil || len(route.Brokers) != 2 {
		t.Fatalf("route: %d groups (%v), want b1 and b2: the warming node's half route was served", len(route.Brokers), err)
	}
}

// TestWatchOverTheNodesCapKeepsItsStream: a client watches more topics
// than the node lets one connection watch (--max-watches-per-conn, here
// 50). The node refuses the watch request that would pass the cap (code
// 12, changing nothing); the topics it accepted stay watched on the same
// stream, and the client does not tear the stream down and re-watch
// everything in a loop. Before, every refusal ended the stream: a new
// stream and a full re-watch every backoff, for as long as the watch
// lasted.
func TestWatchOverTheNodesCapKeepsItsStream(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, func(cfg *node.Config) { cfg.MaxWatchesPerConn = 50 })
	c := newClient(t, ca, nodes.Static(tn.Addr()), func(cfg *routeclient.Config) { cfg.Fanout = 1 })
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	first := make([]string, 40)
	for i := range first {
		first[i] = fmt.Sprintf("first-%d", i)
	}
	ch, err := c.Watch(ctx, first...)
	if err != nil {
		t.Fatal(err)
	}
	register(t, tn, "b1", "10.0.0.1:10911", 4, first[0])
	until(t, ch, "the first topic's route", func(u routeclient.Update) bool { return u.Topic == first[0] })
	more := make([]string, 40)
	for i := range more {
		more[i] = fmt.Sprintf("more-%d", i)
	}
	if _, err := c.Watch(ctx, more...); err != nil { // 80 in all: over the cap of 50
		t.Fatal(err)
	}
	streams := c.Stats().WatchStreams
	// The first watch's topics are still watched: changes are pushed.
	for q := uint32(5); q <= 8; q++ {
		register(t, tn, "b1", "10.0.0.1:10911", q, first[0])
		until(t, ch, "the change", func(u routeclient.Update) bool { return writeQueues(u) == q })
	}
	if now := c.Stats().WatchStreams; now != streams {
		t.Errorf("watch streams went from %d to %d while the node refused topics over its cap: the stream was torn down", streams, now)
	}
}

// TestWatchThroughANodeRestartShowsNoPartialView: two nodes hold b1 and
// b2; one restarts empty and warms up, b1 re-registers with it first and
// pushes a route without b2 on the resumed stream. The merged watch never
// delivers that half route, nor "gone": the other node still holds b2
// live, and the restarted node is warming (PROTOCOL.md 9.1).
func TestWatchThroughANodeRestartShowsNoPartialView(t *testing.T) {
	ca := newTestCA(t)
	var mu sync.Mutex
	warmUp := time.Duration(-1)
	withWarmUp := func(cfg *node.Config) {
		mu.Lock()
		cfg.WarmUp = warmUp
		mu.Unlock()
	}
	tns := sortedNodes(t, ca, 2, withWarmUp)
	for _, tn := range tns {
		register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
		register(t, tn, "b2", "10.0.0.2:10911", 4, "orders")
	}
	c := newClient(t, ca, nodes.Static(addrsOf(tns)...), nil)
	ch, err := c.Watch(ctxT(t), "orders")
	if err != nil {
		t.Fatal(err)
	}
	until(t, ch, "both groups", func(u routeclient.Update) bool { return len(u.Route.Brokers) == 2 })
	waitFor(t, "a stream to each node", func() bool { return c.Stats().WatchStreams == 2 })
	mu.Lock()
	warmUp = time.Hour
	mu.Unlock()
	tns[0].Restart()
	waitFor(t, "the watch to resume on the restarted node", func() bool { return c.Stats().WatchStreams >= 3 })
	events := c.Stats().Events
	register(t, tns[0], "b1", "10.0.0.1:10911", 4, "orders") // b2 has not re-registered yet
	waitFor(t, "the restarted node's push", func() bool { return c.Stats().Events > events })
	// A change both nodes see, so that the watch delivers after the push.
	for _, tn := range tns {
		register(t, tn, "b1", "10.0.0.1:10911", 8, "orders")
	}
	until(t, ch, "the change", func(u routeclient.Update) bool {
		if u.Gone || len(u.Route.Brokers) != 2 {
			t.Fatalf("partial view delivered: %+v", u)
		}
		return writeQueues(u) == 8
	})
}

// TestWatchOverALossyLinkGetsTheFinalVersion: a third of the datagrams
// between the client and the node are lost, both ways, while the route
// changes in quick succession; the watch delivers the final version (the
// node coalesces, QUIC retransmits, and nothing in between is needed).
func TestWatchOverALossyLinkGetsTheFinalVersion(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 1, "orders")
	p, err := lossyudp.New(tn.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c := newClient(t, ca, nodes.Static(p.Addr()), func(cfg *routeclient.Config) { cfg.Fanout = 1 })
	ch, err := c.Watch(ctxT(t), "orders")
	if err != nil {
		t.Fatal(err)
	}
	until(t, ch, "the first route", func(u routeclient.Update) bool { return writeQueues(u) == 1 })
	p.SetDrop(33)
	dropped := func() bool { to, from := p.Dropped(); return to+from > 0 }
	// Changes until the proxy has really dropped some of their packets
	// (a few changes may coalesce into a packet or two that all got
	// through), and at least 20.
	q := uint32(2)
	for ; q < 20 || !dropped(); q++ {
		if q > 5000 {
			t.Fatal("the proxy dropped nothing in 5,000 changes: the test tested no loss")
		}
		register(t, tn, "b1", "10.0.0.1:10911", q, "orders")
		if q%50 == 0 { // let pushes go out between bursts
			time.Sleep(time.Millisecond)
		}
	}
	final := q - 1
	until(t, ch, "the final version", func(u routeclient.Update) bool { return writeQueues(u) == final })
}

// TestDeadNodeIsDialledOnceByConcurrentReadsOfOneTopic: concurrent reads
// of one topic share one lookup. When that lookup failed because the dead
// node's dial timed out (an error that wraps context.DeadlineExceeded, as
// the leader's own deadline would), each waiting read took it for the
// leader's deadline and looked again, in turn: 8 reads, 8 dials one after
// another, the last read failing after 8 request timeouts.
func TestDeadNodeIsDialledOnceByConcurrentReadsOfOneTopic(t *testing.T) {
	ca := newTestCA(t)
	dead := newBlackhole(t)
	c := newClient(t, ca, nodes.Static(dead.addr()), func(cfg *routeclient.Config) {
		cfg.RequestTimeout = time.Second
		cfg.Backoff = nodes.Backoff{Min: time.Minute, Max: time.Minute}
	})
	const reads = 8
	var wg sync.WaitGroup
	errs := make(chan error, reads)
	for range reads {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
			defer cancel()
			_, _, err := c.Route(ctx, "orders")
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
		t.Errorf("%d concurrent reads of one topic dialled the dead node %d times, want 1 (2 at most, for a read that came after the lookup ended)", reads, n)
	}
}

// TestWaiterLooksAgainWhenTheLeadersDeadlineEnds: the read that leads a
// shared lookup gives up on its own short deadline; a read waiting on it
// with time left looks again itself rather than taking the leader's
// deadline for its own failure.
func TestWaiterLooksAgainWhenTheLeadersDeadlineEnds(t *testing.T) {
	ca := newTestCA(t)
	dead := newBlackhole(t)
	c := newClient(t, ca, nodes.Static(dead.addr()), func(cfg *routeclient.Config) {
		cfg.RequestTimeout = time.Second
		cfg.Backoff = nodes.Backoff{Min: time.Minute, Max: time.Minute}
	})
	lctx, cancel := context.WithCancel(ctxT(t))
	leader := make(chan error, 1)
	go func() {
		_, _, err := c.Route(lctx, "orders")
		leader <- err
	}()
	waitFor(t, "the leader's dial", func() bool { return dead.dials() == 1 })
	waiter := make(chan error, 1)
	go func() {
		_, _, err := c.Route(ctxT(t), "orders")
		waiter <- err
	}()
	// The leader's context ends, most often while the waiter waits on its
	// flight (if the waiter comes later, it leads a lookup of its own: the
	// outcome below is the same).
	cancel()
	if err := <-leader; !errors.Is(err, context.Canceled) {
		t.Fatalf("leader: %v, want its own cancellation", err)
	}
	err := <-waiter
	if err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("waiter: %v, want its own lookup's failure", err)
	}
	if n := dead.dials(); n < 2 {
		t.Errorf("the waiter did not look again: %d dials", n)
	}
}

// TestLargeFanoutIsBounded: Fanout says that more than the node list
// holds asks every node, so a caller may well set a large one to mean
// "all". Before, the watch hub made a stream slot for each unit of it at
// New: a goroutine each, and a view per slot for every watched topic
// (Fanout 1000: 1000 goroutines; math.MaxInt: New never returned).
func TestLargeFanoutIsBounded(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	c := newClient(t, ca, nodes.Static(tn.Addr()), func(cfg *routeclient.Config) { cfg.Fanout = 1000 })
	if _, _, err := c.Route(ctxT(t), "orders"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch, err := c.Watch(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch)
	if n := clientGoroutines(); n > 4*routeclient.MaxFanout {
		t.Fatalf("a client with Fanout 1000 runs %d goroutines", n)
	}
}

// clientGoroutines counts the goroutines running the route client's code
// (the node's own, in this process too, are left out).
func clientGoroutines() int {
	buf := make([]byte, 16<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "wire/routeclient.") && !strings.Contains(g, "routeclient_test.") {
			n++
		}
	}
	return n
}
