package simtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire"
)

// update is one route update a watching client received.
type update struct {
	At      time.Time
	Client  int
	Topic   string
	Gone    bool
	Brokers int
}

// watchAll watches topics on client sc until ctx ends, recording every
// update. The returned wait blocks until the watch has ended.
func watchAll(t *testing.T, ctx context.Context, sc *simClient, topics []string, mu *sync.Mutex, out *[]update) (wait func()) {
	t.Helper()
	ch, err := sc.c.Watch(ctx, topics...)
	if err != nil {
		t.Fatalf("client %d: watch: %v", sc.idx, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for u := range ch {
			mu.Lock()
			*out = append(*out, update{At: time.Now(), Client: sc.idx, Topic: u.Topic, Gone: u.Gone, Brokers: len(u.Route.Brokers)})
			mu.Unlock()
		}
	})
	return wg.Wait
}

// TestBrokerCrashExpires kills one of 20 brokers without unregistering (it
// drops off the network, then its registrar closes) at the default
// timings. Every node removes it when its lease runs out: between the
// threshold (120 s) and the threshold plus one scan interval (5 s) after
// the last heartbeat that node received, and no other broker goes. Clients
// watching the broker's own topic are told it is gone, and clients
// watching the shared topic get the route without it, within a moment of
// the expiry on the node they watch through; route readers stop seeing
// the broker.
func TestBrokerCrashExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const nBrokers = 20
		s := newSim(t, simConfig{Nodes: 3, Brokers: nBrokers, Clients: 3, Seed: 4})
		s.waitSynced(2 * time.Minute)
		victim := s.brokers[7]

		// Two more clients only watch, each its own single user (see
		// clientRefresh).
		var watchers []*simClient
		for i := 3; i < 5; i++ {
			sc := s.startClient(i)
			s.clients = append(s.clients, sc)
			watchers = append(watchers, sc)
		}
		var mu sync.Mutex
		var updates []update
		wctx, wcancel := context.WithCancel(context.Background())
		var waits []func()
		for _, sc := range watchers {
			waits = append(waits, watchAll(t, wctx, sc, []string{sharedTopic, victim.topic}, &mu, &updates))
		}
		defer func() {
			wcancel()
			for _, w := range waits {
				w()
			}
		}()
		readers := s.clients[:3]
		rd := s.startReaders(readers, 10*time.Second, func(int) []string { return []string{sharedTopic} })

		time.Sleep(75 * time.Second) // a few heartbeats, and the watches are up
		lastBeat := make([]time.Time, len(s.nodes))
		for i, sn := range s.nodes {
			l, ok := sn.n.Registry().Lease(clusterName, victim.addr)
			if !ok {
				t.Fatalf("node %d holds no lease for %s", i, victim.addr)
			}
			lastBeat[i] = l.LastHeartbeat
		}
		kept := s.snapshotLeases()
		killAt := time.Now()
		victim.kill()

		threshold, scan := node.DefaultExpiryThreshold, node.DefaultScanInterval
		for i := 0; i < int((threshold+2*scan)/time.Second); i++ {
			time.Sleep(time.Second)
			gone := true
			for _, sn := range s.nodes {
				gone = gone && !sn.hasLease(victim)
			}
			if gone {
				break
			}
		}
		time.Sleep(15 * time.Second) // pushes and a reader round land
		rd.stop()

		exp := s.ev.expired()
		if len(exp) != len(s.nodes) {
			t.Errorf("%d expiries, want one per node (%d): %+v", len(exp), len(s.nodes), exp)
		}
		var first, last time.Time
		for _, e := range exp {
			if e.Addr != victim.addr {
				t.Errorf("node %d expired %s, a live broker", e.Node, e.Addr)
				continue
			}
			if !e.LastHeartbeat.Equal(lastBeat[e.Node]) {
				t.Errorf("node %d: last heartbeat %s at expiry, %s before the kill", e.Node, e.LastHeartbeat.Format(time.TimeOnly), lastBeat[e.Node].Format(time.TimeOnly))
			}
			if d := e.silence(); d < threshold || d > threshold+scan {
				t.Errorf("node %d expired %s %s after its last heartbeat, want %s to %s", e.Node, e.Addr, d, threshold, threshold+scan)
			}
			t.Logf("node %d expired the broker %s after its last heartbeat there (%s after the kill)", e.Node, e.silence(), e.At.Sub(killAt))
			if first.IsZero() || e.At.Before(first) {
				first = e.At
			}
			if e.At.After(last) {
				last = e.At
			}
		}
		for _, sn := range s.nodes {
			if sn.hasLease(victim) {
				t.Errorf("node %d still holds the killed broker's lease", sn.idx)
			}
			if n := sn.leases(); n != nBrokers-1 {
				t.Errorf("node %d holds %d leases, want %d", sn.idx, n, nBrokers-1)
			}
			if n := sn.routeBrokers(sharedTopic); n != nBrokers-1 {
				t.Errorf("node %d's route of %s names %d brokers, want %d", sn.idx, sharedTopic, n, nBrokers-1)
			}
			if _, _, err := sn.n.Registry().RouteData(victim.topic); err == nil {
				t.Errorf("node %d still has a route for %s", sn.idx, victim.topic)
			}
		}

		// No other broker lost its lease anywhere (epochs, registrations).
		for _, l := range s.leasesLost(kept) {
			t.Errorf("after the kill: %s", l)
		}

		// Watchers: told within a second of the first expiry, and not
		// before it.
		mu.Lock()
		got := append([]update(nil), updates...)
		mu.Unlock()
		for _, sc := range watchers {
			var goneAt, shrunkAt time.Time
			for _, u := range got {
				if u.Client != sc.idx {
					continue
				}
				switch {
				case u.Topic == victim.topic && u.Gone && goneAt.IsZero():
					goneAt = u.At
				case u.Topic == sharedTopic && u.Brokers == nBrokers-1 && shrunkAt.IsZero():
					shrunkAt = u.At
				}
			}
			for what, at := range map[string]time.Time{victim.topic + " gone": goneAt, sharedTopic + " without the broker": shrunkAt} {
				switch {
				case at.IsZero():
					t.Errorf("watching client %d was never told %s", sc.idx, what)
				case at.Before(first) || at.After(last.Add(time.Second)):
					t.Errorf("watching client %d was told %s at %s; the nodes expired the broker from %s to %s",
						sc.idx, what, at.Format(time.TimeOnly), first.Format(time.TimeOnly), last.Format(time.TimeOnly))
				default:
					t.Logf("watching client %d told %s %s after the first expiry (%s after the kill)", sc.idx, what, at.Sub(first), at.Sub(killAt))
				}
			}
			st := sc.c.Stats()
			t.Logf("watching client %d: %d events on %d streams", sc.idx, st.Events, st.WatchStreams)
		}

		// Readers: every read succeeds; after the last expiry plus a
		// round, none names the killed broker.
		for _, r := range rd.all() {
			switch {
			case r.Err != nil:
				t.Errorf("client %d at %s: %s: %v", r.Client, r.At.Format(time.TimeOnly), r.Topic, r.Err)
			case r.Topic == sharedTopic && r.At.After(last.Add(10*time.Second)) && r.Brokers != nBrokers-1:
				t.Errorf("client %d at %s, after the expiry: route of %s names %d brokers, want %d", r.Client, r.At.Format(time.TimeOnly), r.Topic, r.Brokers, nBrokers-1)
			}
		}
		// A fresh read of the killed broker's topic says it is gone.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, _, err := readers[0].c.Route(ctx, victim.topic); !errors.Is(err, wire.ErrNotFound) {
			t.Errorf("route of %s after the expiry: %v, want not found", victim.topic, err)
		}
		t.Logf("log records:%s", s.ev.summary())
	})
}
