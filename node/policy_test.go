package node

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wasm"
	"github.com/edgereg/edgereg/wasm/wasmtest"
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

	// Active policies survive a restart (restored in the background).
	tn.stop()
	tn = startNodeIn(t, dir, tn.Addr().String(), nil)
	waitRestored(t, tn)
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

// waitRestored waits until the node has restored its saved policies.
func waitRestored(t testing.TB, tn *testNode) {
	t.Helper()
	select {
	case <-tn.policies.set.Restored():
	case <-policyCtx(t).Done():
		t.Fatal("saved policies were not restored")
	}
}

func TestHostilePoliciesRefusedOrContained(t *testing.T) {
	tn := startNode(t, func(c *Config) {
		c.MaxPolicyUploadsPerMinute = 100
		// loop.wasm spins on every real call until the deadline: 500 ms
		// keeps that short (the test nodes' 5 s made this test take 26 s)
		// and is still 25 times what the dry runs missed under load.
		c.PolicyCallTimeout = 500 * time.Millisecond
	})
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
	for range 2 {
		if _, err := op.PolicyPush(ctx, "expiry", readModule(t, "jitter-threshold.wasm")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := op.PolicyPush(ctx, "expiry", readModule(t, "jitter-threshold.wasm")); !errors.Is(err, wire.ErrOverloaded) {
		t.Fatalf("third push in a minute: %v", err)
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
// pause. No read may fail, and every read that ran entirely between two
// swaps must show what the policy active then shows: the filtered route
// while zone-affinity is active, the whole route after a remove. A read
// the policy answered by falling back (the unfiltered route while the
// policy is active) fails the test; so does any counted fallback.
func TestHotSwapUnderLoad(t *testing.T) {
	tn := startNode(t, func(c *Config) {
		c.MaxPolicyUploadsPerMinute = 1000
		// A generous deadline: the test checks answers, and a Go guest
		// under -race on a loaded machine can miss 20 ms.
		c.PolicyCallTimeout = 2 * time.Second
	})
	ctx := policyCtx(t)
	op := tn.dial(pki.RoleOperator)
	zonedBrokers(t, op)
	module := readModule(t, "zone-affinity.wasm")
	// Compile it once before the load: a swap then costs what activation
	// costs, and the test measures swaps, not compilation under -race.
	if _, err := op.PolicyPush(ctx, "route", module); err != nil {
		t.Fatal(err)
	}
	// gen is odd while a swap is in progress; gen/2 swaps are complete.
	// After k swaps (swap i pushes when i is odd, removes when even) the
	// policy is active when k == 0 or k-1 is odd.
	var gen, reads, failed, checked, wrong atomic.Int64
	filtered := func(k int64) bool { return k == 0 || (k-1)%2 == 1 }
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
				g1 := gen.Load()
				rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				route, _, err := c.Route(rctx, "t", wire.ClientAttrs{Zone: "zone-1"})
				cancel()
				g2 := gen.Load()
				reads.Add(1)
				if err != nil {
					t.Log(err)
					failed.Add(1)
					continue
				}
				if g1 != g2 || g1%2 == 1 {
					continue // a swap overlapped the read: either answer is right
				}
				checked.Add(1)
				want := 3
				if filtered(g1 / 2) {
					want = 2
				}
				if len(route.Brokers) != want {
					wrong.Add(1)
					t.Errorf("after %d swaps a read saw %d groups, want %d", g1/2, len(route.Brokers), want)
				}
			}
		}()
	}
	waitChecked := func() { // a few checked reads in every stable phase
		target := checked.Load() + 5
		for i := 0; checked.Load() < target && i < 10_000; i++ {
			time.Sleep(time.Millisecond)
		}
	}
	waitChecked()
	for i := range 10 {
		gen.Add(1)
		if i%2 == 1 {
			if _, err := op.PolicyPush(ctx, "route", module); err != nil {
				t.Error(err)
			}
		} else if _, err := op.PolicyRemove(ctx, "route"); err != nil {
			t.Error(err)
		}
		gen.Add(1)
		waitChecked()
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reads, %d checked against the policy active at the time, %d wrong, %d failed", reads.Load(), checked.Load(), wrong.Load(), failed.Load())
	if failed.Load() != 0 || checked.Load() < 10 {
		t.Fatalf("%d of %d reads failed, %d checked", failed.Load(), reads.Load(), checked.Load())
	}
	list, err := op.PolicyList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list[0].Fallbacks != 0 {
		t.Errorf("%d route reads fell back to the unfiltered route", list[0].Fallbacks)
	}
}

// rss reads this process's resident set size: the node under test runs
// in it.
func rss(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm")
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// TestHostileUploadsBounded pushes each hostile shape of issue 11 to a
// running node while clients read routes: each is refused within its
// deadline with a message naming the limit, the node's RSS stays within
// 256 MiB of where it started, and every read meanwhile succeeds.
func TestHostileUploadsBounded(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.MaxPolicyUploadsPerMinute = 1000 })
	op := tn.dial(pki.RoleOperator)
	zonedBrokers(t, op)
	var reads, failed atomic.Int64
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
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
				if _, _, err := c.Route(ctxT(t), "t", wire.ClientAttrs{Zone: "zone-1"}); err != nil {
					t.Log(err)
					failed.Add(1)
				}
				reads.Add(1)
			}
		}()
	}
	for i := 0; reads.Load() < 20; i++ { // the readers are warm
		if i > 10_000 {
			t.Fatal("readers do not read")
		}
		time.Sleep(time.Millisecond)
	}
	shapes := wasmtest.HostileShapes()
	runtime.GC()
	debug.FreeOSMemory()
	base := rss(t)
	wg.Add(1)
	go func() { // samples the RSS
		defer wg.Done()
		for {
			peak.Store(max(peak.Load(), rss(t)-base))
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	for _, sh := range shapes {
		before := reads.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		_, err := op.PolicyPush(ctx, "route", sh.Module)
		took := time.Since(start)
		cancel()
		t.Logf("%-22s %8d bytes: answered in %v, %d reads meanwhile, peak RSS +%d MiB: %v",
			sh.Name, len(sh.Module), took.Round(time.Millisecond), reads.Load()-before, peak.Load()>>20, err)
		if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), sh.Limit) {
			t.Errorf("%s: push = %v, want a refusal naming %q", sh.Name, err, sh.Limit)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reads during the uploads, %d failed; peak RSS growth %d MiB", reads.Load(), failed.Load(), peak.Load()>>20)
	if failed.Load() != 0 || reads.Load() == 0 {
		t.Errorf("%d of %d reads failed during the uploads", failed.Load(), reads.Load())
	}
	if peak.Load() > 256<<20 {
		t.Errorf("RSS grew by %d MiB during the uploads, want under 256", peak.Load()>>20)
	}
	if list, _ := op.PolicyList(ctxT(t)); list[0].Hash != "" {
		t.Errorf("a hostile module became active: %+v", list[0])
	}
}

// TestPolicyDirBreakingLimitRefused: a module in --policy-dir that breaks
// a structural limit is refused at start and the node serves anyway.
func TestPolicyDirBreakingLimitRefused(t *testing.T) {
	policyDir := t.TempDir()
	bomb := wasmtest.HostileShapes()[0] // 2^32-1 locals
	os.WriteFile(filepath.Join(policyDir, "route.wasm"), bomb.Module, 0o644)
	var logs syncBuffer
	tn := startNode(t, func(c *Config) {
		c.PolicyDir = policyDir
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	op := tn.dial(pki.RoleOperator)
	zonedBrokers(t, op)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(logs.String(), "policy directory refused") {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal logged:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "locals") {
		t.Errorf("the refusal does not name the limit:\n%s", logs.String())
	}
	if got, _ := groupsOf(t, op, "zone-1"); len(got) != 3 {
		t.Fatalf("the node serves %v, want every group (no policy)", got)
	}
}

// TestUploadPastItsDeadlineChangesNothing: an upload the node cannot
// finish within the deadline its sender gave is answered with code 15 and
// activates nothing, then or later.
func TestUploadPastItsDeadlineChangesNothing(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.MaxPolicyUploadsPerMinute = 100 })
	op := tn.dial(pki.RoleOperator)
	ctx := policyCtx(t)
	// Code of its own makes the module new to the compilation cache, so
	// validating it starts a compile child, which takes more than 1 ms. (A
	// custom section no longer does: modules are compiled without them.)
	module := wasmtest.DivisionChain(1, 1000+int(time.Now().UnixNano()%100_000))
	var info wire.PolicyInfo
	err := op.Call(ctx, wire.TypePolicyPush, &wire.PolicyPush{Hook: "route", Module: module, TimeoutMs: 1}, &info)
	if !errors.Is(err, wire.ErrTimeout) {
		t.Fatalf("push with a 1 ms deadline: %v, want code 15", err)
	}
	// A test of the same module waits for any compilation of it in flight,
	// so once it answers, the push has finished with everything it does.
	if _, err := op.PolicyTest(ctx, "route", module, nil); err != nil {
		t.Fatal(err)
	}
	if p := policyOf(t, op, "route"); p.Hash != "" {
		t.Fatalf("the upload whose deadline passed was activated: %+v", p)
	}
}

// TestPolicyTestsHaveTheirOwnBudget: tests do not use up the push budget.
func TestPolicyTestsHaveTheirOwnBudget(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.MaxPolicyUploadsPerMinute = 2 })
	op := tn.dial(pki.RoleOperator)
	ctx := policyCtx(t)
	module := readModule(t, "jitter-threshold.wasm")
	for range 2 {
		if _, err := op.PolicyTest(ctx, "expiry", module, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := op.PolicyTest(ctx, "expiry", module, nil); !errors.Is(err, wire.ErrOverloaded) {
		t.Fatalf("third test in a minute: %v, want code 12", err)
	}
	if _, err := op.PolicyPush(ctx, "expiry", module); err != nil {
		t.Fatalf("push after two tests: %v", err)
	}
}

// TestServesWhileRestoring: a restarted node whose saved module must be
// compiled again (no compilation cache) serves reads at once.
func TestServesWhileRestoring(t *testing.T) {
	dir := t.TempDir()
	slow := func(c *Config) { c.PolicyCallTimeout = 2 * time.Second } // a Go guest under -race
	tn := startNodeIn(t, dir, "127.0.0.1:0", slow)
	if _, err := tn.dial(pki.RoleOperator).PolicyPush(policyCtx(t), "route", readModule(t, "zone-affinity.wasm")); err != nil {
		t.Fatal(err)
	}
	tn.stop()
	start := time.Now()
	tn = startNodeIn(t, dir, tn.Addr().String(), func(c *Config) { slow(c); c.PolicyCacheDir = t.TempDir() })
	op := tn.dial(pki.RoleOperator)
	zonedBrokers(t, op)
	got, _ := groupsOf(t, tn.dial(pki.RoleClient), "zone-1")
	served := time.Since(start)
	restoring := true
	select {
	case <-tn.policies.set.Restored():
		restoring = false
	default:
	}
	t.Logf("first read served %v after start (%v groups), restore still running: %v", served.Round(time.Millisecond), got, restoring)
	if !restoring {
		t.Fatal("the restore finished before the first read: the test cannot tell whether reads wait for it")
	}
	if len(got) != 3 {
		t.Errorf("during the restore zone-1 sees %v, want everything (built-in behaviour)", got)
	}
	waitRestored(t, tn)
	if got, _ := groupsOf(t, op, "zone-1"); len(got) != 2 {
		t.Errorf("after the restore zone-1 sees %v, want the policy's answer", got)
	}
}

// TestEachTopicRunsInParallel: with a route policy active, a read's
// topics are filtered on up to the pool size of goroutines at once.
func TestEachTopicRunsInParallel(t *testing.T) {
	tn := startNode(t, nil)
	if _, err := tn.dial(pki.RoleOperator).PolicyPush(policyCtx(t), "route", readModule(t, "fixtures/empty-route.wasm")); err != nil {
		t.Fatal(err)
	}
	pool := tn.policies.host.Config().PoolSize
	var running, most atomic.Int64
	tn.policies.eachTopic(20, func(int) {
		n := running.Add(1)
		defer running.Add(-1)
		for i := 0; running.Load() < int64(pool) && i < 2000; i++ {
			time.Sleep(time.Millisecond) // wait for the others, bounded
		}
		most.Store(max(most.Load(), n, running.Load()))
	})
	if most.Load() != int64(pool) {
		t.Fatalf("at most %d topics filtered at once, want the pool size %d", most.Load(), pool)
	}
}

// metric returns the value of the sample of a family whose labels
// include want (a histogram's count), or -1.
func metric(t testing.TB, tn *testNode, family string, want map[string]string) float64 {
	t.Helper()
	mfs, err := tn.stats.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// TestPolicyMetricsNeverGoBackwards: policy counters are per (hook,
// module) and survive pushes of other modules; call times are a
// histogram; label values are spelled one way.
func TestPolicyMetricsNeverGoBackwards(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.MaxPolicyUploadsPerMinute = 100; c.PolicyCallTimeout = 2 * time.Second })
	ctx := policyCtx(t)
	op := tn.dial(pki.RoleOperator)
	zonedBrokers(t, op)
	reader := tn.dial(pki.RoleClient)
	zone, err := op.PolicyPush(ctx, "route", readModule(t, "zone-affinity.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"hook": "route", "module": zone.Hash[:12]}
	groupsOf(t, reader, "zone-1")
	groupsOf(t, reader, "zone-2")
	before := metric(t, tn, "edgereg_policy_calls_total", labels)
	if before < 2 {
		t.Fatalf("calls of zone-affinity = %v, want at least 2", before)
	}
	if _, err := op.PolicyPush(ctx, "route", readModule(t, "fixtures/empty-route.wasm")); err != nil {
		t.Fatal(err)
	}
	groupsOf(t, reader, "zone-1")
	if got := metric(t, tn, "edgereg_policy_calls_total", labels); got < before {
		t.Errorf("calls of zone-affinity went from %v to %v after another push", before, got)
	}
	if _, err := op.PolicyPush(ctx, "route", readModule(t, "zone-affinity.wasm")); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, tn, "edgereg_policy_calls_total", labels); got < before {
		t.Errorf("calls of zone-affinity went from %v to %v when it was pushed again", before, got)
	}
	if got := metric(t, tn, "edgereg_policy_call_duration_seconds", labels); got < before {
		t.Errorf("call-time histogram count %v, want at least %v", got, before)
	}
	if _, err := op.PolicyRollback(ctx, "confirm"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("rollback with nothing to roll back: %v", err)
	}
	if got := metric(t, tn, "edgereg_request_errors_total", map[string]string{"code": "not_found"}); got != 1 {
		t.Errorf("errors with code not_found = %v, want 1", got)
	}
}

// TestPolicyChangesLoggedOnceWithTheOperator: each activation, rollback
// and removal is logged once, with the operator's certificate name and
// the hook spelled as the CLI spells it.
func TestPolicyChangesLoggedOnceWithTheOperator(t *testing.T) {
	var logs syncBuffer
	tn := startNode(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	ctx := policyCtx(t)
	op := tn.dial(pki.RoleOperator)
	if _, err := op.PolicyPush(ctx, "expiry", readModule(t, "jitter-threshold.wasm")); err != nil {
		t.Fatal(err)
	}
	if _, err := op.PolicyRemove(ctx, "expiry"); err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{`msg="policy activated"`, `msg="policy removed"`} {
		var lines []string
		for l := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(l, msg) {
				lines = append(lines, l)
			}
		}
		if len(lines) != 1 || !strings.Contains(lines[0], "hook=expiry") || !strings.Contains(lines[0], "by=test-operator") {
			t.Errorf("%s logged as %q, want once with hook=expiry by=test-operator", msg, lines)
		}
	}
}

// TestReadBudgetBoundsAManyTopicRead: one read of 100 topics under a legal
// route policy that spends most of a call deadline on each call
// (slow-route.wasm) starts guest calls only within the node's read budget
// (here 1 ms, so at most one per worker); every other topic is answered by
// the fail mode (open: the unfiltered route) and counted as a fallback, not
// as the module's error; a leases request is served meanwhile. Before, all
// 100 calls ran, one after another per worker.
func TestReadBudgetBoundsAManyTopicRead(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.PolicyCallTimeout = 2 * time.Second; c.PolicyReadBudget = time.Millisecond })
	ctx := policyCtx(t)
	op := tn.dial(pki.RoleOperator)
	const topics = 100
	var names []string
	q := &wire.GetRoutes{}
	for i := range topics {
		names = append(names, "t"+strconv.Itoa(i))
		q.Topics = append(q.Topics, wire.TopicVersion{Topic: names[i]})
	}
	if _, err := op.Register(ctx, registration("c1", "g", 0, "10.0.0.1:1", names...)); err != nil {
		t.Fatal(err)
	}
	if _, err := op.PolicyPush(ctx, "route", readModule(t, "hostile/slow-route.wasm")); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		rs  wire.Routes
		err error
	}
	done := make(chan answer, 1)
	go func() {
		rs, err := tn.dial(pki.RoleClient).GetRoutes(ctx, q)
		done <- answer{rs, err}
	}()
	if _, err := op.Leases(ctx); err != nil {
		t.Fatalf("leases during a many-topic read: %v", err)
	}
	a := <-done
	if a.err != nil || len(a.rs.Results) != topics {
		t.Fatalf("read: %d results, %v", len(a.rs.Results), a.err)
	}
	for _, r := range a.rs.Results {
		if r.Status != wire.StatusOK || len(r.Route) == 0 {
			t.Fatalf("%s: status %v with %d bytes, want a route", r.Topic, r.Status, len(r.Route))
		}
	}
	info := tn.policyInfo(wasmHook(t, "route"))
	pool := uint64(tn.policies.host.Config().PoolSize)
	answered := info.Calls - info.Fallbacks
	t.Logf("100 topics, budget 1 ms: %d guest calls answered, %d fallbacks (workers %d)", answered, info.Fallbacks, pool)
	if info.Calls != topics || answered > pool || info.Errors != 0 {
		t.Fatalf("policy %+v: want %d calls, at most %d answered by the guest (one per worker), the rest fallbacks, no error", info, topics, pool)
	}
	labels := map[string]string{"hook": "route", "module": info.Hash[:12]}
	if got := metric(t, tn, "edgereg_policy_fallbacks_total", labels); got != float64(info.Fallbacks) {
		t.Fatalf("edgereg_policy_fallbacks_total = %v, want %d", got, info.Fallbacks)
	}
}

// TestRouteFailureModesEndToEnd: with a route policy that traps, a
// fail-open node serves the unfiltered route and a fail-closed node
// answers the topic with status policy-failed and no route; both count a
// fallback.
func TestRouteFailureModesEndToEnd(t *testing.T) {
	for _, mode := range []wasm.FailMode{wasm.FailDefault, wasm.FailOpen, wasm.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			tn := startNode(t, func(c *Config) { c.PolicyCallTimeout = 2 * time.Second; c.PolicyRouteFailure = mode })
			ctx := policyCtx(t)
			op := tn.dial(pki.RoleOperator)
			zonedBrokers(t, op)
			if _, err := op.PolicyPush(ctx, "route", readModule(t, "hostile/trap.wasm")); err != nil {
				t.Fatal(err)
			}
			rs, err := tn.dial(pki.RoleClient).GetRoutes(ctx, &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "t"}}})
			if err != nil {
				t.Fatal(err)
			}
			r := rs.Results[0]
			if mode == wasm.FailClosed {
				if r.Status != wire.StatusPolicyFailed || len(r.Route) != 0 || r.Version != 0 {
					t.Fatalf("fail-closed: status %v, %d bytes, version %d; want policy-failed and no route", r.Status, len(r.Route), r.Version)
				}
				if got := metric(t, tn, "edgereg_route_reads_total", map[string]string{"result": "policy_failed"}); got != 1 {
					t.Fatalf("route reads policy_failed = %v, want 1", got)
				}
			} else {
				route, _, err := client.DecodeResult(&r)
				if err != nil || len(route.Brokers) != 3 {
					t.Fatalf("fail-open: %d brokers, %v; want the unfiltered route of 3 groups", len(route.Brokers), err)
				}
			}
			if info := tn.policyInfo(wasmHook(t, "route")); info.Fallbacks != 1 || info.Errors != 1 {
				t.Fatalf("policy %+v, want 1 fallback and 1 error", info)
			}
		})
	}
}

func wasmHook(t testing.TB, name string) wasm.Hook {
	t.Helper()
	h, err := wasm.ParseHook(name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestRestartRefusesCorruptPolicyManifest: a node whose saved policy
// manifest does not parse (a disk fault, a bad copy of the data
// directory) does not start, with an error naming the file, as with a
// corrupt kvconfig.json. Before, it started with no policies, and the
// next push overwrote the manifest and deleted every module it named.
func TestRestartRefusesCorruptPolicyManifest(t *testing.T) {
	dir := t.TempDir()
	tn := startNodeIn(t, dir, "127.0.0.1:0", nil)
	if _, err := tn.dial(pki.RoleOperator).PolicyPush(policyCtx(t), "expiry", readModule(t, "jitter-threshold.wasm")); err != nil {
		t.Fatal(err)
	}
	tn.stop()
	manifest := filepath.Join(dir, "policies", "manifest.json")
	torn := []byte(`{"version": 1, "hooks": {"expiry-thr`)
	if err := os.WriteFile(manifest, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{Addr: "127.0.0.1:0", AdminAddr: AdminOff, DataDir: dir, Logger: quietLogger(), WarmUp: -1,
		PolicyCacheDir: sharedPolicyCache})
	if err == nil {
		n.Shutdown(context.Background())
		t.Fatal("a node with a manifest that does not parse started")
	}
	if !strings.Contains(err.Error(), manifest) {
		t.Errorf("start error %q does not name %s", err, manifest)
	}
	if b, _ := os.ReadFile(manifest); string(b) != string(torn) {
		t.Errorf("the manifest was rewritten: %q", b)
	}
	if mods, _ := filepath.Glob(filepath.Join(dir, "policies", "*.wasm")); len(mods) != 1 {
		t.Errorf("saved modules %v, want the one pushed", mods)
	}
	// The data directory is not left locked: once the file is fixed (here
	// removed), the node starts.
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	startNodeIn(t, dir, "127.0.0.1:0", nil)
}
