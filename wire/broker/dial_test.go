package broker_test

import (
	"sync"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/broker"
	"github.com/edgereg/edgereg/wire/lossyudp"
	"github.com/edgereg/edgereg/wire/nodes"
)

// TestDialOutlastsTheRequestTimeout: a node that stays silent for longer
// than the request timeout, as a node does while a storm's handshakes wait
// for a slot, is still connected to on the first dial (DialTimeout, three
// request timeouts by default), with no failed dial in between: a broker
// that gave up and redialled would join the back of the node's queue.
func TestDialOutlastsTheRequestTimeout(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	tns, _ := startNodes(t, ca, 1)
	proxy, err := lossyudp.New(tns[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.SetDrop(100)
	cfg := testConfig(t, ca, nodes.Static(proxy.Addr()))
	cfg.RequestTimeout = 500 * time.Millisecond
	var mu sync.Mutex
	var failures []string
	cfg.OnStateChange = func(st broker.NodeState) {
		mu.Lock()
		defer mu.Unlock()
		if st.LastError != "" {
			failures = append(failures, st.LastError)
		}
	}
	r := startRegistrar(t, cfg)
	time.AfterFunc(800*time.Millisecond, func() { proxy.SetDrop(0) })
	waitFor(t, "registration through the node's silence", func() bool {
		sts := r.Nodes()
		return len(sts) == 1 && sts[0].Registered
	})
	mu.Lock()
	defer mu.Unlock()
	if len(failures) > 0 {
		t.Errorf("dial failed before the node answered: %q", failures)
	}
}
