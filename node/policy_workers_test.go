package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wasm/wasmtest"
	"github.com/edgereg/edgereg/wire"
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
	// Set before the node starts, so its goroutines see it without a race.
	dispatched := make(chan struct{}, maxPolicyUploadsAtOnce)
	testHookDispatch = func(f *wire.Frame) {
		if f.Type == wire.TypePolicyPush {
			dispatched <- struct{}{}
		}
	}
	t.Cleanup(func() { testHookDispatch = nil }) // after the node's shutdown
	tn := startNode(t, func(c *Config) { c.BrokerWorkers = 2 })
	broker := tn.dial(pki.RoleBroker)
	if _, err := broker.Register(ctxT(t), registration("c1", "b1", 0, "10.0.0.1:1", "t")); err != nil {
		t.Fatal(err)
	}
	// Uploads of a module that takes ~20 s to compile, each on its own
	// connection (a connection's requests are answered in turn): each runs
	// until its deadline, 6 s (the node's compile runs that long whatever
	// the client does), long enough that a loaded machine still has every
	// one in progress when it looks.
	module := wasmtest.SlowCompile()
	uploadCtx, stopUploads := context.WithTimeout(context.Background(), 6*time.Second)
	defer stopUploads()
	uploads := make(chan error, cap(tn.policyWorkers))
	for range cap(tn.policyWorkers) {
		op := tn.dial(pki.RoleOperator)
		go func() {
			_, err := op.PolicyPush(uploadCtx, "route", module)
			uploads <- err
		}()
	}
	for i := range cap(tn.policyWorkers) {
		select {
		case <-dispatched: // one more upload is being handled
		case err := <-uploads:
			t.Fatalf("upload %d ended before the node handled it: %v", i+1, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of %d uploads reached the node in 30 s", i, cap(tn.policyWorkers))
		}
	}
	// The registration has a fraction of the uploads' time.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := broker.Register(ctx, registration("c1", "b1", 0, "10.0.0.1:1", "t", "t2"))
	t.Logf("registration answered in %v during %d uploads: %v", time.Since(start).Round(time.Millisecond), cap(tn.policyWorkers), err)
	if err != nil {
		t.Errorf("a broker's registration during policy uploads: %v", err)
	}
	// Refused at once, not queued: its own deadline is the uploads' own.
	if _, err := tn.dial(pki.RoleOperator).PolicyPush(uploadCtx, "route", module); !errors.Is(err, wire.ErrOverloaded) {
		t.Errorf("one upload more than the node handles at once: %v, want overloaded", err)
	}
	for range cap(tn.policyWorkers) {
		if err := <-uploads; err == nil {
			t.Error("an upload of a module that compiles for 20 s succeeded")
		}
	}
}
