package simtest

import (
	"context"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestConcurrentFirstReads guards a fixed bug: two concurrent Route calls
// on a new client both reach routeclient's node.get, and the first dials.
// When node.get held a sync.Mutex while dialling, the second caller waited
// for that dial whatever its own context said; under synctest, blocking on
// a mutex is not a durable block, so the bubble's clock stopped and the
// dial never ended. node.get now waits on a channel with select on the
// caller's context. If the bug comes back this test reports it after 20 s
// (leaving the wedged bubble behind).
func TestConcurrentFirstReads(t *testing.T) {
	done := make(chan struct{})
	var took time.Duration
	go func() {
		defer close(done)
		synctest.Test(t, func(t *testing.T) {
			s := newSim(t, simConfig{Nodes: 1, Brokers: 1, Clients: 1})
			s.waitSynced(time.Minute)
			c := s.clients[0].c
			start := time.Now()
			var wg sync.WaitGroup
			for _, topic := range []string{sharedTopic, brokerTopic(0)} {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if _, _, err := c.Route(ctx, topic); err != nil {
						t.Errorf("route of %s: %v", topic, err)
					}
				})
			}
			wg.Wait()
			took = time.Since(start)
		})
	}()
	select {
	case <-done:
		t.Logf("two concurrent first reads took %s of virtual time", took)
	case <-time.After(20 * time.Second):
		var buf strings.Builder
		pprof.Lookup("goroutine").WriteTo(&buf, 2)
		for _, g := range strings.Split(buf.String(), "\n\n") {
			if strings.Contains(g, "sync.Mutex.Lock") && strings.Contains(g, "routeclient") {
				t.Logf("blocked on the mutex:\n%s", g)
			}
		}
		t.Fatal("the bubble is wedged: two concurrent Route calls on a new route client never return (routeclient node.get holds a sync.Mutex across its dial)")
	}
}
