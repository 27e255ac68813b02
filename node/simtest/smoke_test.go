package simtest

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestSmoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s := newSim(t, simConfig{Nodes: 1, Brokers: 1, Clients: 1})
		s.waitSynced(time.Minute)
		t.Logf("synced after %s", time.Since(start))
		rd := s.startReaders(10*time.Second, func(int) []string { return []string{sharedTopic} })
		time.Sleep(2 * time.Minute)
		rd.stop()
		for _, r := range rd.all() {
			if r.Err != nil {
				t.Errorf("read: %+v", r)
			}
		}
		t.Logf("reads %d, leases %d, events %s", len(rd.all()), s.nodes[0].leases(), s.ev.summary())
		t.Logf("net %+v", s.net.snapshot())
	})
}
