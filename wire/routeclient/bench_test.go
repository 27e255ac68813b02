package routeclient_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
)

// fanout measures, per round, the time from a route change on the node to
// the moment the last of its watchers has the new route.
type fanout struct {
	mu       sync.Mutex
	pending  int
	start    time.Time
	last     time.Time
	done     chan struct{}
	expected uint32 // write queues of the round's route
}

func (f *fanout) round(watchers int, queues uint32) {
	f.mu.Lock()
	f.pending, f.expected, f.done, f.start = watchers, queues, make(chan struct{}), time.Now()
	f.mu.Unlock()
}

// saw records that one watcher saw a route with queues write queues.
func (f *fanout) saw(queues uint32) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if queues != f.expected || f.pending == 0 {
		return
	}
	if f.pending--; f.pending == 0 {
		f.last = now
		close(f.done)
	}
}

func (f *fanout) wait(b *testing.B) time.Duration {
	f.mu.Lock()
	done := f.done
	f.mu.Unlock()
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatal("not every watcher saw the change")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last.Sub(f.start)
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "ms-p50-last-watcher")
	b.ReportMetric(pct(0.99), "ms-p99-last-watcher")
	b.ReportMetric(0, "ns/op")
}

func queuesOf(r *wire.Route) uint32 {
	if len(r.Queues) == 0 {
		return 0
	}
	return r.Queues[0].WriteQueues
}

// BenchmarkWatchFanout has 1000 watchers of one topic and changes its route
// once per iteration. Raw: 10 QUIC connections × 100 watch streams, each a
// watcher on the node (within the node's default limits: 64 connections
// per host, 100 streams per connection). Client: 10 route clients (one
// connection and one watch stream each) × 100 Watch subscriptions, so the
// node pushes 10 events and each client fans out to 100 channels.
func BenchmarkWatchFanout(b *testing.B) {
	const conns, perConn = 10, 100
	ca := newTestCA(b)
	tn := startNode(b, ca, nil)
	register(b, tn, "b1", "10.0.0.1:10911", 1, "orders")

	b.Run("raw-10conns-x100streams", func(b *testing.B) {
		f := &fanout{}
		f.round(conns*perConn, 1)
		cred := ca.TLS(b, pki.RoleClient, "fanout")
		var wg sync.WaitGroup
		ctx, cancel := context.WithCancel(context.Background())
		defer func() { cancel(); wg.Wait() }()
		for range conns {
			conn, err := client.Dial(ctx, tn.Addr(), client.Config{TLS: cred})
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			for range perConn {
				p, err := conn.OpenPipe(ctx)
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() {
					for fr := range p.Events() {
						var ev wire.RouteEvent
						if fr.DecodeBody(&ev) != nil {
							continue
						}
						route, _, err := client.DecodeResult(&ev.Result)
						if err == nil {
							f.saw(queuesOf(&route))
						}
					}
				})
				if err := p.Call(ctx, wire.TypeWatch, &wire.Watch{Topics: []wire.TopicVersion{{Topic: "orders"}}}, nil); err != nil {
					b.Fatal(err)
				}
			}
		}
		f.wait(b) // everyone has the first route
		runRounds(b, tn, f, conns*perConn)
	})

	b.Run("client-10clients-x100subs", func(b *testing.B) {
		f := &fanout{}
		f.round(conns*perConn, queuesNow(b, tn))
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		for range conns {
			c := newClient(b, ca, nodes.Static(tn.Addr()), nil)
			for range perConn {
				ch, err := c.Watch(ctx, "orders")
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() {
					for u := range ch {
						f.saw(queuesOf(&u.Route))
					}
				})
			}
		}
		f.wait(b)
		runRounds(b, tn, f, conns*perConn)
	})
}

var benchQueues uint32 = 1

func queuesNow(b *testing.B, tn *testNode) uint32 {
	route, _, err := tn.Node().Registry().RouteData("orders")
	if err != nil {
		b.Fatal(err)
	}
	return queuesOf(&route)
}

// runRounds changes the route b.N times (its write queue count) and
// reports how long the last watcher took to see each change.
func runRounds(b *testing.B, tn *testNode, f *fanout, watchers int) {
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		benchQueues++
		f.round(watchers, benchQueues)
		register(b, tn, "b1", "10.0.0.1:10911", benchQueues, "orders")
		lat = append(lat, f.wait(b))
	}
	reportPercentiles(b, lat)
}
