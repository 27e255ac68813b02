package node

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wasm/wasmtest"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// TestUploadsLeaveBrokersTheirWorkers: policy uploads compile and dry-run
// a module for up to their deadline (minutes). They ran on the worker pool
// of brokers and operators, so as many uploads as that pool has workers
// (4 on a 2-core node) held every worker, and brokers' registrations and
// heartbeats waited for them: a few slow uploads could expire every
// broker. A broker is now answered while uploads run; uploads have slots
// of their own, and one more is refused at once.
func TestUploadsLeaveBrokersTheirWorkers(t *testing.T) {
	// Each upload is held in the node, on its slot, until the test has
	// made its checks: under load, uploads that ran only until a deadline
	// of their own (6 s) could end before the checks were made (and the
	// deadline ran out while the 4 MB modules were still arriving), so the
	// registration and the refused fifth upload raced the clock. Set
	// before the node starts, so its goroutines see it without a race.
	dispatched := make(chan struct{}, maxPolicyUploadsAtOnce)
	held := make(chan struct{})
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(held) }) }
	testHookDispatch = func(f *wire.Frame) {
		if f.Type == wire.TypePolicyPush {
			dispatched <- struct{}{}
			<-held
		}
	}
	t.Cleanup(func() { testHookDispatch = nil }) // after the node's shutdown
	tn := startNode(t, func(c *Config) {
		c.BrokerWorkers = 2
		// Only against a hang: four 4 MB uploads at once through QUIC's
		// flow control, under -race beside busy loops, took longer than
		// the 10 s default to arrive, and the node reset their streams.
		c.ReadTimeout = 2 * time.Minute
	})
	t.Cleanup(release) // before the node's shutdown, which waits for the uploads
	broker := tn.dial(pki.RoleBroker)
	if _, err := broker.Register(ctxT(t), registration("c1", "b1", 0, "10.0.0.1:1", "t")); err != nil {
		t.Fatal(err)
	}
	// Uploads of a module that takes ~20 s to compile, each on its own
	// connection (a connection's requests are answered in turn). Once
	// released, each compiles for its 1 s deadline (counted from when the
	// node starts the upload) and fails: the node's compile runs that long
	// whatever the client does.
	module := wasmtest.SlowCompile()
	ops := make([]*client.Conn, cap(tn.policyWorkers))
	for i := range ops {
		ops[i] = tn.dial(pki.RoleOperator)
	}
	uploads := make(chan error, len(ops))
	for _, op := range ops {
		go func() {
			var info wire.PolicyInfo
			uploads <- op.Call(policyCtx(t), wire.TypePolicyPush, &wire.PolicyPush{Hook: "route", Module: module, TimeoutMs: 1000}, &info)
		}()
	}
	for i := range len(ops) {
		select {
		case <-dispatched: // one more upload is being handled
		case err := <-uploads:
			t.Fatalf("upload %d ended before the node handled it: %v", i+1, err)
		case <-time.After(time.Minute):
			t.Fatalf("only %d of %d uploads reached the node in a minute", i, len(ops))
		}
	}
	// Every upload slot is held: a broker is answered all the same.
	start := time.Now()
	_, err := broker.Register(ctxT(t), registration("c1", "b1", 0, "10.0.0.1:1", "t", "t2"))
	t.Logf("registration answered in %v during %d uploads: %v", time.Since(start).Round(time.Millisecond), len(ops), err)
	if err != nil {
		t.Errorf("a broker's registration during policy uploads: %v", err)
	}
	// Refused at once, not queued.
	if _, err := tn.dial(pki.RoleOperator).PolicyPush(policyCtx(t), "route", module); !errors.Is(err, wire.ErrOverloaded) {
		t.Errorf("one upload more than the node handles at once: %v, want overloaded", err)
	}
	release()
	for range len(ops) {
		if err := <-uploads; err == nil {
			t.Error("an upload of a module that compiles for 20 s succeeded")
		}
	}
}
