package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/nodes"
)

func manyTopics(prefix string, n int) []wire.TopicConfig {
	out := make([]wire.TopicConfig, n)
	for i := range out {
		out[i] = wire.TopicConfig{Name: fmt.Sprintf("%s-%05d", prefix, i), ReadQueues: 8, WriteQueues: 8, Perm: wire.PermRead | wire.PermWrite}
	}
	return out
}

// TestPathMTUDropAndDuplicates: a broker registered through a link whose
// path MTU then shrinks to quic-go's initial packet size (every datagram
// over 1280 bytes dropped: path MTU discovery had grown the packets past
// that on loopback, and quic-go never lowers them again on a path) while a
// fifth of the datagrams arrive twice. Heartbeats are small and keep the
// lease under its epoch; a topic update of 1,000 topics (some 40 KB, in
// full-size packets) still reaches the node, by a smaller packet size on
// the same connection or a new one.
func TestPathMTUDropAndDuplicates(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	tn := startNode(t, ca, func(c *node.Config) {
		c.ScanInterval = 20 * time.Millisecond
		c.HeartbeatInterval, c.ExpiryThreshold = 500*time.Millisecond, 3*time.Second
	})
	proxy := newProxy(t, tn.Addr())
	cfg := testConfig(t, ca, nodes.Static(proxy.Addr()))
	cfg.HeartbeatInterval = 500 * time.Millisecond
	cfg.RequestTimeout = time.Second
	cfg.Topics = manyTopics("big", 1000)
	r := startRegistrar(t, cfg)
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// Let path MTU discovery grow the packets (a probe every few round
	// trips, and the heartbeats give it round trips).
	time.Sleep(2 * time.Second)
	before, _ := lease(tn, brokerAddr)
	proxy.SetMTU(1280)
	proxy.SetDuplicate(20)
	if err := r.UpsertTopics(manyTopics("more", 1000)...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	synced := make(chan error, 1)
	go func() { synced <- r.WaitSynced(ctx) }()
	for done := false; !done; {
		select {
		case err := <-synced:
			if err != nil {
				up, down := proxy.Dropped()
				t.Fatalf("the update did not cross the smaller path MTU: %v (dropped %d/%d, state %+v)", err, up, down, r.Nodes())
			}
			done = true
		case <-time.After(20 * time.Millisecond):
		}
		if l, ok := lease(tn, brokerAddr); !ok || l.Epoch != before.Epoch {
			t.Fatalf("the node lost the lease after the path MTU dropped (lease %v, epoch %d, was %d)", ok, l.Epoch, before.Epoch)
		}
	}
	if !hasRoute(tn, "more-00999") {
		t.Fatal("the node lacks the updated topics")
	}
	up, down := proxy.Dropped()
	st := r.Nodes()[0]
	t.Logf("over the 1280-byte path: %d datagrams dropped toward the node, %d from it; dials %d, registrations %d, updates %d", up, down, st.Dials, st.Registrations, st.Updates)
	if up+down == 0 {
		t.Fatal("no datagram exceeded the smaller MTU: the test proves nothing")
	}
}
