package simtest

import (
	"context"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func isBroker(a netip.Addr) bool { return a.As4()[0] == 10 && a.As4()[1] == 1 }
func isClient(a netip.Addr) bool { return a.As4()[0] == 10 && a.As4()[1] == 2 }

// TestDeadNodeIsNotHammered crashes node 1 of 2 for 15 minutes of virtual
// time while 3 brokers keep their registrations and 2 route clients read
// every 2 s (a refresh and two reads), and counts the dials each side
// makes against the dead node minute by minute (one QUIC Initial
// connection ID per dial), and the goroutines that run.
//
// Every retry against the node must back off to a bounded rate: a
// broker's reconnects are capped at half a probe interval plus a short
// dial (so a node back is found within about one probe interval), a
// route client's at its backoff ceiling (30 s by default) — a client
// that asked the dead node on every read dialled it every request
// timeout, for ever. Nothing may grow with the outage's length: the
// goroutines at the end are as many as after the first minute.
func TestDeadNodeIsNotHammered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const nBrokers, outage = 3, 15 * time.Minute
		s := newSim(t, simConfig{Nodes: 2, Brokers: nBrokers, Clients: 2, Seed: 11})
		s.waitSynced(2 * time.Minute)
		rd := s.startReaders(s.clients, 2*time.Second, func(i int) []string {
			return []string{sharedTopic, brokerTopic(i)}
		})
		// A client that only watches (its own single user, see
		// clientRefresh): its streams to the dead node must back off too.
		watcher := s.startClientOf(5, s.nodeAddrs(), clientRefresh)
		s.clients = append(s.clients, watcher)
		wctx, stopWatch := context.WithCancel(context.Background())
		var wmu sync.Mutex
		var updates []update
		waitWatch := watchAll(t, wctx, watcher, []string{sharedTopic}, &wmu, &updates)
		isWatcher := func(a netip.Addr) bool { return a == clientIP(5) }
		isReader := func(a netip.Addr) bool { return isClient(a) && a != clientIP(5) }
		time.Sleep(30 * time.Second)
		dead := s.nodes[1]
		dead.crash()
		var brokerDials, clientDials, watchDials []int
		var goroutines []int
		var heap []uint64
		for range int(outage / time.Minute) {
			b0, c0, w0 := s.net.dialsTo(dead.ap.Addr(), isBroker), s.net.dialsTo(dead.ap.Addr(), isReader), s.net.dialsTo(dead.ap.Addr(), isWatcher)
			time.Sleep(time.Minute)
			brokerDials = append(brokerDials, s.net.dialsTo(dead.ap.Addr(), isBroker)-b0)
			clientDials = append(clientDials, s.net.dialsTo(dead.ap.Addr(), isReader)-c0)
			watchDials = append(watchDials, s.net.dialsTo(dead.ap.Addr(), isWatcher)-w0)
			goroutines = append(goroutines, runtime.NumGoroutine())
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heap = append(heap, ms.HeapAlloc>>20)
			if n := s.nodes[0].leases(); n != nBrokers {
				t.Errorf("the live node holds %d leases, want %d", n, nBrokers)
			}
		}
		rd.stop()
		stopWatch()
		waitWatch()
		sum := rd.summary(nBrokers)
		t.Logf("dials per minute against the dead node: brokers (%d) %v, reading clients (2) %v, watching client %v", nBrokers, brokerDials, clientDials, watchDials)
		t.Logf("goroutines at the end of each minute: %v; heap MiB after GC: %v", goroutines, heap)
		// A watch slot redials after a full-jitter backoff of up to 30 s
		// plus a 5 s dial: 3 a minute on average, more in a minute of
		// short draws; 12 a minute without a backoff.
		total := 0
		for _, n := range watchDials[2:] {
			total += n
		}
		if limit := 5 * len(watchDials[2:]); total > limit {
			t.Errorf("from minute 3 the watching client dialled the dead node %d times, want at most %d (backoff ceiling 30 s)", total, limit)
		}
		if first, last := heap[0], heap[len(heap)-1]; last > 2*first+16 {
			t.Errorf("the heap grew from %d MiB to %d MiB over the outage", first, last)
		}
		t.Logf("reads: %+v", sum)
		if sum.ReadErrs > 0 || sum.RefreshErrs > 0 || sum.Short > 0 {
			t.Errorf("with one node of two dead, reads failed or were short: %+v", sum)
		}
		// A broker redials at most every half probe interval (2.5 s)
		// plus a 5 s dial: at most 12 per minute (one per dial timeout).
		for m, n := range brokerDials[1:] {
			if n > nBrokers*12 {
				t.Errorf("minute %d: %d broker dials against the dead node, want at most %d", m+2, n, nBrokers*12)
			}
		}
		// A client backs off to its ceiling (30 s): 2 dials a minute.
		for m, n := range clientDials[2:] {
			if n > 2*3 {
				t.Errorf("minute %d: %d client dials against the dead node, want at most %d (backoff ceiling 30 s)", m+3, n, 2*3)
			}
		}
		if first, last := goroutines[0], goroutines[len(goroutines)-1]; last > first+10 {
			t.Errorf("goroutines grew from %d to %d over the outage", first, last)
		}
	})
}
