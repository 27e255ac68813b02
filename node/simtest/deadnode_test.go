package simtest

import (
	"net/netip"
	"runtime"
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
		time.Sleep(30 * time.Second)
		dead := s.nodes[1]
		dead.crash()
		var brokerDials, clientDials []int
		var goroutines []int
		for range int(outage / time.Minute) {
			b0, c0 := s.net.dialsTo(dead.ap.Addr(), isBroker), s.net.dialsTo(dead.ap.Addr(), isClient)
			time.Sleep(time.Minute)
			brokerDials = append(brokerDials, s.net.dialsTo(dead.ap.Addr(), isBroker)-b0)
			clientDials = append(clientDials, s.net.dialsTo(dead.ap.Addr(), isClient)-c0)
			goroutines = append(goroutines, runtime.NumGoroutine())
			if n := s.nodes[0].leases(); n != nBrokers {
				t.Errorf("the live node holds %d leases, want %d", n, nBrokers)
			}
		}
		rd.stop()
		sum := rd.summary(nBrokers)
		t.Logf("dials per minute against the dead node: brokers (%d) %v, clients (%d) %v", nBrokers, brokerDials, len(s.clients), clientDials)
		t.Logf("goroutines at the end of each minute: %v", goroutines)
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
			if n > len(s.clients)*3 {
				t.Errorf("minute %d: %d client dials against the dead node, want at most %d (backoff ceiling 30 s)", m+3, n, len(s.clients)*3)
			}
		}
		if first, last := goroutines[0], goroutines[len(goroutines)-1]; last > first+10 {
			t.Errorf("goroutines grew from %d to %d over the outage", first, last)
		}
	})
}
