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
	// until its deadline, 3 s.
	module := wasmtest.SlowCompile()
	uploads := make(chan error, cap(tn.policyWorkers))
	for range cap(tn.policyWorkers) {
		op := tn.dial(pki.RoleOperator)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := op.PolicyPush(ctx, "route", module)
			uploads <- err
		}()
	}
	for range cap(tn.policyWorkers) {
		<-dispatched // every upload is being handled
	}
	// The registration has half the uploads' time.
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := broker.Register(ctx, registration("c1", "b1", 0, "10.0.0.1:1", "t", "t2"))
	t.Logf("registration answered in %v during %d uploads: %v", time.Since(start).Round(time.Millisecond), cap(tn.policyWorkers), err)
	if err != nil {
		t.Errorf("a broker's registration during policy uploads: %v", err)
	}
	if _, err := tn.dial(pki.RoleOperator).PolicyPush(ctx, "route", module); !errors.Is(err, wire.ErrOverloaded) {
		t.Errorf("one upload more than the node handles at once: %v, want overloaded", err)
	}
	for range cap(tn.policyWorkers) {
		if err := <-uploads; err == nil {
			t.Error("an upload of a module that compiles for 20 s succeeded within 3 s")
		}
	}
}
