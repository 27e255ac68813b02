package broker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
	refused := map[string]bool{}
	for _, st := range log.all() {
		if st.Refused != nil {
			refused[st.Addr] = true
		}
	}
	if len(refused) != len(addrs) {
		t.Errorf("OnStateChange delivered the refusal of %d of %d nodes: %+v", len(refused), len(addrs), log.all())
	}
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
