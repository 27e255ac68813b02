package broker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/broker"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
)

// stateLog records what OnStateChange delivers.
type stateLog struct {
	mu     sync.Mutex
	states []broker.NodeState
}

func (l *stateLog) add(st broker.NodeState) {
	l.mu.Lock()
	l.states = append(l.states, st)
	l.mu.Unlock()
}

func (l *stateLog) all() []broker.NodeState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]broker.NodeState(nil), l.states...)
}

// TestRefusedForTheGroupSurfaces registers a broker whose certificate
// allows another group: every node refuses it (not authorized). The
// refusal is permanent: WaitSynced returns it, Run returns it (instead of
// retrying for ever and reporting a clean stop), the sessions stop
// retrying, and OnStateChange delivers it.
func TestRefusedForTheGroupSurfaces(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 2)
	cfg := testConfig(t, ca, nodes.Static(addrs...))
	cfg.TLS = ca.TLS(t, pki.RoleBroker, "broker-other", "other-group") // not b1
	var log stateLog
	cfg.OnStateChange = log.add
	r, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- r.Run(context.Background()) }()

	err = r.WaitSynced(ctxT(t))
	if !errors.Is(err, broker.ErrRefused) || !errors.Is(err, wire.ErrNotAuthorized) {
		t.Errorf("WaitSynced: %v, want a refusal (not authorized)", err)
	}
	var runErr error
	select {
	case runErr = <-ran:
	case <-time.After(30 * time.Second):
		r.Close()
		t.Fatal("Run kept running though every node refused the broker")
	}
	var re *broker.RefusedError
	if !errors.As(runErr, &re) || !errors.Is(runErr, wire.ErrNotAuthorized) || re.Op != "register" {
		t.Fatalf("Run returned %v, want the nodes' refusal of the registration", runErr)
	}
	t.Logf("Run returned: %v", runErr)
	for _, st := range r.Nodes() {
		if st.Refused == nil || st.Registered || st.Registrations != 0 {
			t.Errorf("node %s: %+v, want refused and never registered", st.Addr, st)
		}
	}
	for _, tn := range tns {
		if _, ok := lease(tn, brokerAddr); ok {
			t.Errorf("node %s holds a lease for the refused broker", tn.Addr())
		}
	}
	// Each callback runs on its session's goroutine, perhaps still
	// running when the last refusal ended Run.
	waitFor(t, "OnStateChange to deliver every node's refusal", func() bool {
		refused := map[string]bool{}
		for _, st := range log.all() {
			if st.Refused != nil {
				refused[st.Addr] = true
			}
		}
		return len(refused) == len(addrs)
	})
}

// TestStateChangesAreDelivered follows one node's session through
// connect, register, a restart of the node (disconnect, reconnect,
// register again) and Stop.
func TestStateChangesAreDelivered(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 1)
	cfg := testConfig(t, ca, nodes.Static(addrs...))
	var log stateLog
	cfg.OnStateChange = log.add
	r := startRegistrar(t, cfg)
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	tns[0].Restart()
	waitFor(t, "registration with the restarted node", func() bool {
		st, _ := stateOf(r, addrs[0])
		return st.Registered && st.Registrations == 2
	})
	if err := r.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range log.all() {
		switch {
		case st.Registered:
			got = append(got, "registered")
		case st.Connected:
			got = append(got, "connected")
		default:
			got = append(got, "disconnected")
		}
	}
	want := []string{"connected", "registered", "disconnected", "connected", "registered", "disconnected"}
	if len(got) != len(want) {
		t.Fatalf("state changes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("state changes %v, want %v", got, want)
		}
	}
}

// TestFollowsTheTightestNode registers with a node at the defaults, then
// also with one run at 1 s heartbeats and a 3 s threshold. The registrar,
// configured for one heartbeat a minute, follows the default node's 30 s
// at first, then heartbeats every node every second, the first one too
// (its heartbeat planned 30 s out is pulled in), and goes back to 30 s once
// the tight node leaves the list.
func TestFollowsTheTightestNode(t *testing.T) {
	t.Parallel() // mostly waits on timers and timeouts
	ca := newTestCA(t)
	loose := startNode(t, ca, nil)
	tight := startNode(t, ca, func(c *node.Config) { c.HeartbeatInterval, c.ExpiryThreshold = time.Second, 3*time.Second })
	list := nodes.NewList(loose.Addr())
	cfg := testConfig(t, ca, list)
	cfg.HeartbeatInterval = time.Minute
	r := startRegistrar(t, cfg)
	if err := r.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if iv := r.HeartbeatInterval(); iv != node.DefaultHeartbeatInterval {
		t.Errorf("heartbeat interval %s with a default node, want its %s", iv, node.DefaultHeartbeatInterval)
	}

	list.Set(loose.Addr(), tight.Addr())
	waitFor(t, "registration with the added node", func() bool {
		st, ok := stateOf(r, tight.Addr())
		return ok && st.Registered
	})
	if iv := r.HeartbeatInterval(); iv != time.Second {
		t.Errorf("heartbeat interval %s with a node at 1s/3s listed, want 1s", iv)
	}
	for _, st := range r.Nodes() {
		want := [2]time.Duration{node.DefaultHeartbeatInterval, node.DefaultExpiryThreshold}
		if st.Addr == tight.Addr() {
			want = [2]time.Duration{time.Second, 3 * time.Second}
		}
		if got := [2]time.Duration{st.NodeHeartbeatInterval, st.Threshold}; got != want {
			t.Errorf("node %s said interval and threshold %v, want %v", st.Addr, got, want)
		}
	}
	// Five heartbeats take five seconds at the new pace; at the old one
	// the first alone would come 27 to 30 s after the registration.
	before, _ := lease(loose, brokerAddr)
	waitFor(t, "heartbeats to the default node at the tight node's pace", func() bool {
		l, ok := lease(loose, brokerAddr)
		return ok && l.Heartbeats >= before.Heartbeats+5
	})

	list.Set(loose.Addr())
	waitFor(t, "the default node's interval once the tight node left the list", func() bool {
		return r.HeartbeatInterval() == node.DefaultHeartbeatInterval
	})
}

// TestRunEndsWhenTheListShrinksToRefusingNodes lists two nodes, one of
// which refuses the broker for good (its group is held in another cluster
// there), then drops the one that accepted it. Every node still listed has
// refused: Run returns the refusal, as it does when every node refuses at
// once, instead of running on with the broker registered nowhere.
func TestRunEndsWhenTheListShrinksToRefusingNodes(t *testing.T) {
	ca := newTestCA(t)
	tns, addrs := startNodes(t, ca, 2)
	if _, err := tns[0].Node().Registry().Register(registry.Registration{
		Cluster: "other-cluster", BrokerName: brokerName, Addr: "127.0.0.1:10999"}); err != nil {
		t.Fatal(err)
	}
	list := nodes.NewList(addrs...)
	r, err := broker.New(testConfig(t, ca, list))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- r.Run(context.Background()) }()
	waitFor(t, "the refusal of the first node and the registration with the second", func() bool {
		a, _ := stateOf(r, addrs[0])
		b, _ := stateOf(r, addrs[1])
		return a.Refused != nil && b.Registered
	})

	list.Set(addrs[0])
	select {
	case err = <-ran:
	case <-time.After(10 * time.Second):
		r.Close()
		t.Fatal("Run kept running with every listed node refusing the broker")
	}
	if !errors.Is(err, broker.ErrRefused) || !errors.Is(err, wire.ErrConflict) {
		t.Errorf("Run returned %v, want the first node's conflict", err)
	}
}
