package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// policyCtx bounds a policy test. Validating a 2 MB Go module compiles it,
// which under -race on a busy 2-core machine can take tens of seconds the
// first time (later nodes share the compilation cache).
func policyCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func readModule(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "wasm", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// zonedBrokers registers a master in zone-1, a master in zone-2 and a
// group in zone-2 whose master left (only its slave remains), all holding
// topic t.
func zonedBrokers(t testing.TB, c *client.Conn) {
	t.Helper()
	var leaving wire.LeaseAck
	for _, r := range []*wire.Register{
		withZone(registration("c1", "group-a", 0, "10.0.1.1:1", "t"), "zone-1"),
		withZone(registration("c1", "group-b", 0, "10.0.2.1:1", "t"), "zone-2"),
		withZone(registration("c1", "group-c", 0, "10.0.3.1:1", "t"), "zone-2"),
		withZone(registration("c1", "group-c", 1, "10.0.3.2:1", "t"), "zone-2"),
	} {
		ack, err := c.Register(ctxT(t), r)
		if err != nil {
			t.Fatal(err)
		}
		if r.Addr == "10.0.3.1:1" {
			leaving = ack.Lease
		}
	}
	if err := c.Unregister(ctxT(t), &wire.Unregister{Cluster: "c1", Addr: "10.0.3.1:1", Epoch: leaving.Epoch}); err != nil {
		t.Fatal(err)
	}
}

func withZone(r *wire.Register, zone string) *wire.Register {
	r.Zone = zone
	return r
}

func groupsOf(t testing.TB, c *client.Conn, zone string) ([]string, uint64) {
	t.Helper()
	route, v, err := c.Route(ctxT(t), "t", wire.ClientAttrs{Zone: zone})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range route.Brokers {
		names = append(names, b.Name)
	}
	slices.Sort(names)
	return names, v
}

func TestRoutePolicyEndToEnd(t *testing.T) {
	dir := t.TempDir()
	tn := startNodeIn(t, dir, "127.0.0.1:0", nil)
	ctx := policyCtx(t)
	op := tn.dial(pki.RoleOperator)
	zonedBrokers(t, op)
	reader := tn.dial(pki.RoleClient)
	all, fullVersion := groupsOf(t, reader, "zone-1")
	if len(all) != 3 {
		t.Fatalf("without a policy zone-1 sees %v", all)
	}

	info, err := op.PolicyPush(ctx, "route", readModule(t, "zone-affinity.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Hash == "" || info.Hook != "route" {
		t.Fatalf("push = %+v", info)
	}
	got, v := groupsOf(t, reader, "zone-1")
	if !slices.Equal(got, []string{"group-a", "group-c"}) {
		t.Fatalf("zone-1 sees %v, want its own group and the master-less one", got)
	}
	if v == fullVersion {
		t.Fatal("a filtered route kept the unfiltered version")
	}
	// A poll naming the filtered version is answered "not modified".
	rs, err := reader.GetRoutes(ctx, &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "t", Version: v}}, Client: wire.ClientAttrs{Zone: "zone-1"}})
	if err != nil || rs.Results[0].Status != wire.StatusNotModified {
		t.Fatalf("poll with the filtered version: %+v %v", rs.Results, err)
	}
	if got, _ := groupsOf(t, reader, ""); len(got) != 3 {
		t.Fatalf("a client without a zone sees %v, want everything", got)
	}
	list, err := op.PolicyList(ctx)
	if err != nil || list[0].Hash != info.Hash || list[0].Calls == 0 {
		t.Fatalf("policy list = %+v, %v", list, err)
	}

	// Active policies survive a restart.
	tn.stop()
	tn = startNodeIn(t, dir, tn.Addr().String(), nil)
	op = tn.dial(pki.RoleOperator)
	zonedBrokers(t, op)
	if got, _ := groupsOf(t, tn.dial(pki.RoleClient), "zone-2"); !slices.Equal(got, []string{"group-b", "group-c"}) {
		t.Fatalf("after restart zone-2 sees %v", got)
	}

	// Remove, then roll the removal back.
	if _, err := op.PolicyRemove(ctx, "route"); err != nil {
		t.Fatal(err)
	}
	if got, _ := groupsOf(t, reader2(tn), "zone-1"); len(got) != 3 {
		t.Fatalf("after remove zone-1 sees %v", got)
	}
	if back, err := op.PolicyRollback(ctx, "route"); err != nil || back.Hash != info.Hash {
		t.Fatalf("rollback = %+v, %v", back, err)
	}
	if _, err := op.PolicyRollback(ctx, "confirm"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("rollback with nothing to roll back: %v", err)
	}
}

func reader2(tn *testNode) *client.Conn { return tn.dial(pki.RoleClient) }

func TestHostilePoliciesRefusedOrContained(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.MaxPolicyUploadsPerMinute = 100 })
	ctx := policyCtx(t)
	op := tn.dial(pki.RoleOperator)
	zonedBrokers(t, op)
	reader := tn.dial(pki.RoleClient)
	refused := []string{"abi-version", "import-path-open", "import-sock-accept", "memory-cap"}
	for _, name := range refused {
		_, err := op.PolicyPush(ctx, "route", readModule(t, "hostile/"+name+".wasm"))
		if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "refused") {
			t.Errorf("%s: push = %v, want refused", name, err)
		}
	}
	if _, err := op.PolicyPush(ctx, "expiry", readModule(t, "zone-affinity.wasm")); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("a route module pushed as an expiry policy: %v", err)
	}
	// Modules that pass the dry run and misbehave later are contained:
	// every read still succeeds, unfiltered.
	for _, name := range []string{"loop", "trap", "not-cbor", "add-broker"} {
		if _, err := op.PolicyPush(ctx, "route", readModule(t, "hostile/"+name+".wasm")); err != nil {
			t.Fatalf("%s: push: %v", name, err)
		}
		for i := range 8 {
			got, _ := groupsOf(t, reader, "zone-1")
			if len(got) != 3 {
				t.Fatalf("%s read %d: %v", name, i, got)
			}
		}
		if _, err := op.PolicyRemove(ctx, "route"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPolicyTestAndUploadLimit(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.MaxPolicyUploadsPerMinute = 2 })
	ctx := policyCtx(t)
	op := tn.dial(pki.RoleOperator)
	res, err := op.PolicyTest(ctx, "expiry", readModule(t, "jitter-threshold.wasm"), nil)
	if err != nil || len(res.Output) == 0 || res.Hash == "" {
		t.Fatalf("policy test = %+v, %v", res, err)
	}
	var out struct {
		ThresholdMs int64 `cbor:"1,keyasint"`
	}
	if err := wire.Unmarshal(res.Output, &out); err != nil || out.ThresholdMs <= 0 {
		t.Fatalf("test output %x: %+v %v", res.Output, out, err)
	}
	if list, _ := op.PolicyList(ctx); list[1].Hash != "" {
		t.Fatal("policy test activated the module")
	}
	if _, err := op.PolicyPush(ctx, "expiry", readModule(t, "jitter-threshold.wasm")); err != nil {
		t.Fatal(err)
	}
	if _, err := op.PolicyPush(ctx, "expiry", readModule(t, "jitter-threshold.wasm")); !errors.Is(err, wire.ErrOverloaded) {
		t.Fatalf("third upload in a minute: %v", err)
	}
}

func TestPolicyDirectory(t *testing.T) {
	policyDir := t.TempDir()
	os.WriteFile(filepath.Join(policyDir, "route.wasm"), readModule(t, "zone-affinity.wasm"), 0o644)
	tn := startNode(t, func(c *Config) { c.PolicyDir = policyDir })
	op := tn.dial(pki.RoleOperator)
	zonedBrokers(t, op)
	deadline := time.Now().Add(2 * time.Minute) // the first compile of a 2 MB module under -race
	for {
		if got, _ := groupsOf(t, op, "zone-1"); len(got) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the policy directory's route.wasm never became active")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHotSwapUnderLoad swaps route policies while readers read without
// pause: no read may fail.
func TestHotSwapUnderLoad(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.MaxPolicyUploadsPerMinute = 1000 })
	ctx := policyCtx(t)
	op := tn.dial(pki.RoleOperator)
	zonedBrokers(t, op)
	module := readModule(t, "zone-affinity.wasm")
	// Compile it once before the load: a swap then costs what activation
	// costs, and the test measures swaps, not compilation under -race.
	if _, err := op.PolicyPush(ctx, "route", module); err != nil {
		t.Fatal(err)
	}
	var reads, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		c := tn.dial(pki.RoleClient)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if _, _, err := c.Route(rctx, "t", wire.ClientAttrs{Zone: "zone-1"}); err != nil {
					t.Log(err)
					failed.Add(1)
				}
				cancel()
				reads.Add(1)
			}
		}()
	}
	for i := range 10 {
		if i%2 == 1 {
			_, err := op.PolicyPush(ctx, "route", module)
			if err != nil {
				t.Error(err)
			}
		} else if _, err := op.PolicyRemove(ctx, "route"); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || reads.Load() == 0 {
		t.Fatalf("%d of %d reads failed during hot swaps", failed.Load(), reads.Load())
	}
}
