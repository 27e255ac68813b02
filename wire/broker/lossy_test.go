package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire/lossyudp"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
)

// newProxy starts a lossy proxy in front of target for the test.
func newProxy(t *testing.T, target string) *lossyudp.Proxy {
	t.Helper()
	p, err := lossyudp.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestLossyLink runs a lease of 2 s (the node's threshold) through 6 s of
// a link that loses a third of all datagrams both ways: the lease can only
// hold if heartbeats keep reaching the node, two a second, a lost one
// retransmitted by QUIC or retried by the registrar well within the
// threshold. The node checks for expired leases every 20 ms, and the lease
// must be there, under the same epoch, at every check of the test.
func TestLossyLink(t *testing.T) {
	t.Parallel() // mostly waits on timers and timeouts
	const threshold, window = 2 * time.Second, 6 * time.Second
	ca := newTestCA(t)
	tn := startNode(t, ca, func(c *node.Config) {
		c.ScanInterval = 20 * time.Millisecond
		c.HeartbeatInterval, c.ExpiryThreshold = 500*time.Millisecond, threshold
	})
	proxy := newProxy(t, tn.Addr())
	cfg := testConfig(t, ca, nodes.Static(proxy.Addr()))
	// Two heartbeats a second: four lost in a row, unretried, cost the
	// lease. Requests keep testConfig's 2 s timeout, which a QUIC
	// handshake under -race fits even when every package's tests run at
	// once on 2 cores. node/simtest covers loss deterministically, in
	// virtual time.
	cfg.HeartbeatInterval = 500 * time.Millisecond
	r := startRegistrar(t, cfg)
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	before, _ := lease(tn, brokerAddr)
	if before.Threshold != threshold {
		t.Fatalf("lease threshold %s, want the node's %s", before.Threshold, threshold)
	}

	beats := r.Nodes()[0].Heartbeats
	proxy.SetDrop(33)
	for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if l, ok := lease(tn, brokerAddr); !ok || l.Epoch != before.Epoch {
			t.Fatalf("the node lost the lease on a lossy link (lease %v, epoch %d, was %d)", ok, l.Epoch, before.Epoch)
		}
	}
	proxy.SetDrop(0)
	st := r.Nodes()[0]
	up, down := proxy.Dropped()
	t.Logf("%s of 33%% loss: %d datagrams dropped to the node and %d from it; %d heartbeats acknowledged, %d registrations, %d dials",
		window, up, down, st.Heartbeats-beats, st.Registrations, st.Dials)
	if up == 0 || down == 0 {
		t.Fatalf("the proxy dropped %d datagrams to the node and %d from it: the link was not lossy", up, down)
	}
	if st.Registrations != 1 {
		t.Errorf("%d full registrations, want 1", st.Registrations)
	}
	waitFor(t, "heartbeats after the loss", func() bool { return r.Nodes()[0].Heartbeats > st.Heartbeats+2 })

	// A link that carries nothing: the registrar notices, replaces the
	// connection, and resumes the lease once the link is back.
	dials := r.Nodes()[0].Dials
	proxy.SetDrop(100)
	waitFor(t, "the registrar to notice the dead link", func() bool {
		st := r.Nodes()[0]
		return st.LastError != "" && !st.Registered
	})
	proxy.SetDrop(0)
	waitFor(t, "recovery after the dead link", func() bool {
		st := r.Nodes()[0]
		return st.Registered && st.Dials > dials && st.LastError == ""
	})
	if _, ok := lease(tn, brokerAddr); !ok {
		t.Fatal("no lease after recovery")
	}
}

// deafNode accepts QUIC connections and streams and never reads them, so
// a frame larger than its 16 KiB flow-control windows stalls.
func deafNode(t *testing.T, ca *testCA) string {
	t.Helper()
	const window = 16 << 10
	ln, err := quic.ListenAddr("127.0.0.1:0", pki.ServerConfig(ca.Local().Node, ca.Local().CAPool, false), &quic.Config{
		InitialStreamReceiveWindow: window, MaxStreamReceiveWindow: window,
		InitialConnectionReceiveWindow: window, MaxConnectionReceiveWindow: window,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			qc, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			wg.Go(func() {
				defer qc.CloseWithError(0, "")
				for {
					if _, err := qc.AcceptStream(ctx); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() { cancel(); ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

func TestNodeThatDoesNotReadCannotWedgeTheRegistrar(t *testing.T) {
	t.Parallel() // mostly waits on timers and timeouts
	ca := newTestCA(t)
	cfg := testConfig(t, ca, nodes.Static(deafNode(t, ca)))
	cfg.RequestTimeout = 200 * time.Millisecond
	var names []string
	// About 46 KB: more than the node's flow-control window. (A request
	// carrying topics may take a millisecond per topic longer than the
	// request timeout: 1.2 s here.)
	for i := range 1_000 {
		names = append(names, fmt.Sprintf("topic-with-a-rather-long-name-%06d", i))
	}
	cfg.Topics = topics(names...)
	r := startRegistrar(t, cfg)
	// The registration is stuck writing; the registrar closes the
	// connection under it, and tries again on a new one.
	waitFor(t, "the stuck registration to be abandoned and retried", func() bool {
		st := r.Nodes()
		return len(st) == 1 && st[0].Dials >= 2 && st[0].LastError != ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Stop(ctx) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return")
	}
}

// TestReconnectResumesTheLease forces a reconnect (the link carries nothing
// until the registrar gives the connection up) while the node still holds
// the lease: the registrar resumes it with a heartbeat naming the epoch it
// holds, on the new connection, and sends no full registration.
func TestReconnectResumesTheLease(t *testing.T) {
	t.Parallel() // mostly waits on timers and timeouts
	ca := newTestCA(t)
	tn := startNode(t, ca, nil) // leases last the node's default 120 s
	proxy := newProxy(t, tn.Addr())
	r := startRegistrar(t, testConfig(t, ca, nodes.Static(proxy.Addr())))
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	before, _ := lease(tn, brokerAddr)
	dials := r.Nodes()[0].Dials

	proxy.SetDrop(100)
	waitFor(t, "the registrar to give the dead connection up", func() bool {
		st := r.Nodes()[0]
		return st.LastError != "" && !st.Connected
	})
	proxy.SetDrop(0)
	waitFor(t, "a new connection that renews the lease", func() bool {
		st := r.Nodes()[0]
		l, _ := lease(tn, brokerAddr)
		return st.Dials > dials && st.Registered && st.LastError == "" && l.Heartbeats > before.Heartbeats+2
	})
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	st := r.Nodes()[0]
	after, ok := lease(tn, brokerAddr)
	if !ok || after.Epoch != before.Epoch || st.Epoch != before.Epoch {
		t.Errorf("epoch %d before the reconnect; after it the node holds %d (lease %v) and the registrar %d", before.Epoch, after.Epoch, ok, st.Epoch)
	}
	if st.Registrations != 1 || st.Resumes != 1 {
		t.Errorf("%d full registrations and %d resumptions over %d dials, want 1 and 1: a reconnect within the lease resumes it with a heartbeat",
			st.Registrations, st.Resumes, st.Dials)
	}
	t.Logf("%d full registrations, %d dials, %d heartbeats acknowledged", st.Registrations, st.Dials, st.Heartbeats)
}
