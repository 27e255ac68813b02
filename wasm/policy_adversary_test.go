package wasm

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/edgereg/edgereg/wasm/wasmtest"
	"github.com/edgereg/edgereg/wire"
)

// watWith compiles WebAssembly text with extra wat2wasm flags (proposals
// such as --enable-threads); it skips the test without wat2wasm.
func watWith(t testing.TB, src string, flags ...string) []byte {
	t.Helper()
	path, err := exec.LookPath("wat2wasm")
	if err != nil {
		t.Skip("no wat2wasm (Debian package wabt)")
	}
	dir := t.TempDir()
	cmd := exec.Command(path, append(flags, "-", "-o", dir+"/m.wasm")...)
	cmd.Stdin = strings.NewReader(src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm: %v\n%s", err, out)
	}
	b, err := os.ReadFile(dir + "/m.wasm")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// routeModule is a valid route filter answering the empty route; tag makes
// its bytes (and so its hash) differ from other modules'.
func routeModule(t testing.TB, tag string) []byte {
	return watWith(t, `(module `+abiPrelude+`
  (func (export "edgereg_route_filter") (param i32 i32) (result i64) (i64.const 0x0000004000000007))
  (func (export "tag_`+tag+`")))`)
}

// TestDryRunOnSpentBudgetIsBusy: a module refused only because the node's
// instance budget is spent (every token held by other modules) is not at
// fault: Validate says busy (ErrBusy, retry later), not a refusal of the
// module (a *ValidationError, answered "bad request").
func TestDryRunOnSpentBudgetIsBusy(t *testing.T) {
	h := newHost(t, HostConfig{MaxInstances: 1})
	held := mustValidate(t, h, routeModule(t, "held")) // its dry-run instance holds the only token
	defer held.Close()
	m, err := h.Validate(context.Background(), routeModule(t, "other"))
	if m != nil {
		m.Close()
		t.Fatal("validated with no instance budget left")
	}
	var ve *ValidationError
	if errors.As(err, &ve) || !errors.Is(err, ErrBusy) {
		t.Fatalf("Validate with the budget spent = %v (a refusal: %v), want ErrBusy and no refusal", err, errors.As(err, &ve))
	}
	// Once the budget is back, the same bytes validate: the busy answer
	// was not remembered as a refusal.
	held.Close()
	m = mustValidate(t, h, routeModule(t, "other"))
	m.Close()
}

func mustValidate(t testing.TB, h *Host, b []byte) *Module {
	t.Helper()
	m, err := h.Validate(context.Background(), b)
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	return m
}

// spinOnFF is a route filter that answers the empty route, except for an
// input whose first byte is 0xff (never a CBOR map): then it loops until
// its deadline.
const spinOnFF = `(module ` + abiPrelude + `
  (func (export "edgereg_route_filter") (param $p i32) (param $n i32) (result i64)
    (if (i32.eq (i32.load8_u (local.get $p)) (i32.const 0xff))
      (then (loop $spin (br $spin))))
    (i64.const 0x0000004000000007)))`

// TestDryRunRetriesAMissedDeadlineOnce: one dry-run call that misses its
// deadline (what a loaded node does to a valid module's first call) is
// tried again once on a fresh instance, so a valid module is not refused
// for the node's load; a module that misses it again is refused.
func TestDryRunRetriesAMissedDeadlineOnce(t *testing.T) {
	h := newHost(t, HostConfig{}) // 2 s per call: only the spinning calls wait for it
	b := watWith(t, spinOnFF)
	var calls atomic.Int64
	testHookInvokeInput = func(_ Hook, in []byte) []byte {
		if calls.Add(1) == 1 {
			return []byte{0xff} // the first call misses its deadline
		}
		return in
	}
	t.Cleanup(func() { testHookInvokeInput = nil })
	m, err := h.Validate(context.Background(), b)
	if err != nil {
		t.Fatalf("a module whose first dry-run call missed its deadline once: %v", err)
	}
	m.Close()

	// Every call missing its deadline is still refused, after one retry.
	testHookInvokeInput = func(_ Hook, in []byte) []byte { calls.Add(1); return []byte{0xff} }
	calls.Store(0)
	m, err = h.Validate(context.Background(), tagModule(b, "always"))
	if m != nil {
		m.Close()
	}
	if !errors.Is(err, ErrDryRun) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("a module missing every deadline: %v, want a dry-run refusal naming the deadline", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("a module missing every deadline was called %d times, want 2 (one retry)", n)
	}
}

// tagModule appends a custom section naming tag: the same code under
// another hash.
func tagModule(module []byte, tag string) []byte {
	payload := append([]byte{3}, "tag"...)
	payload = append(payload, tag...)
	out := append([]byte(nil), module...)
	out = append(out, 0, byte(len(payload)))
	return append(out, payload...)
}

// trapOnMarker is a route filter that answers the empty route, but traps
// when its input holds the bytes "MARKER12" anywhere.
const trapOnMarker = `(module ` + abiPrelude + `
  (func (export "edgereg_route_filter") (param $p i32) (param $n i32) (result i64)
    (local $i i32)
    (block $no
      (loop $scan
        (br_if $no (i32.gt_s (i32.add (local.get $i) (i32.const 8)) (local.get $n)))
        (if (i64.eq (i64.load (i32.add (local.get $p) (local.get $i))) (i64.const 0x323152454b52414d))
          (then unreachable))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $scan)))
    (i64.const 0x0000004000000007)))`

// TestTrialGivesTheRouteAsRealCallsDo: `policy test` hands the guest the
// route as a real call does, decoded and encoded again in the node's
// canonical form (ABI.md: keys this version does not define are dropped,
// groups sorted by name), not the bytes the operator gave: a test must
// see what real traffic will.
func TestTrialGivesTheRouteAsRealCallsDo(t *testing.T) {
	h := newHost(t, HostConfig{})
	m := mustValidate(t, h, watWith(t, trapOnMarker))
	defer m.Close()
	// A route with brokers out of order and an unknown key 9 holding the
	// marker, as an operator's hand-written input may have.
	route := map[int]any{
		1: []map[int]any{{1: "b", 2: 4, 3: 4, 4: 6}, {1: "a", 2: 4, 3: 4, 4: 6}},
		2: []map[int]any{{1: "C", 2: "b", 4: map[int]string{0: "10.0.0.2:1"}}, {1: "C", 2: "a", 4: map[int]string{0: "10.0.0.1:1"}}},
		9: "MARKER12",
	}
	input := encode(t, map[int]any{1: map[int]any{}, 2: "t", 3: route, 4: 1, 5: 2})
	out, _, err := m.Trial(context.Background(), HookRouteFilter, input, DefaultMinThreshold, DefaultMaxThreshold)
	if err != nil {
		t.Fatalf("trial with a route holding an unknown key: %v (the guest saw the key)", err)
	}
	var res RouteFilterOutput
	if err := wire.Unmarshal(out, &res); err != nil || len(res.Route.Brokers) != 0 {
		t.Fatalf("trial output %x: %+v %v", out, res, err)
	}
}

// TestMissingSavedModuleDroppedOnce: a saved module whose file is gone
// (deleted by hand, a data directory restored without it) can never be
// restored. The node says so once, at the start that finds it missing,
// and drops it from the saved state, keeping what can be restored; it
// does not fail the restore again at every later start until an operator
// changes the hook.
func TestMissingSavedModuleDroppedOnce(t *testing.T) {
	dir := t.TempDir()
	st, _ := OpenStore(dir)
	h := newHost(t, HostConfig{})
	route := load(t, h, "fixtures/empty-route.wasm")
	other := mustValidate(t, h, routeModule(t, "last-good"))
	defer other.Close()
	s := newSet(t, h, SetConfig{Store: st})
	activate(t, s, HookRouteFilter, other)
	activate(t, s, HookRouteFilter, route) // other is the last good
	s.Close()
	if err := os.Remove(filepath.Join(dir, route.Hash()+".wasm")); err != nil {
		t.Fatal(err)
	}

	start := func() (string, *Set) {
		var logs strings.Builder
		var mu sync.Mutex
		s := newSet(t, h, SetConfig{Store: st, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
		mu.Lock()
		defer mu.Unlock()
		return logs.String(), s
	}
	logs, s2 := start()
	if !strings.Contains(logs, "missing") || !strings.Contains(logs, route.Hash()) {
		t.Errorf("first start with the file gone logged:\n%s\nwant a line naming the missing module", logs)
	}
	if st := s2.List()[HookRouteFilter]; st.LastGood == nil || st.LastGood.Hash != other.Hash() {
		t.Errorf("the last good module, still saved, was not restored: %+v", st.LastGood)
	}
	s2.Close()
	logs, s3 := start()
	defer s3.Close()
	if strings.Contains(logs, route.Hash()) {
		t.Errorf("second start logged the missing module again:\n%s", logs)
	}
	man, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	if e := man.Hooks[HookRouteFilter.String()]; e.Active == route.Hash() || e.LastGood != other.Hash() {
		t.Errorf("saved route entry %+v: want the missing module dropped and the last good kept", e)
	}
}

// FuzzModuleChecks runs the checks the node makes on a module's bytes in
// its own process, before the compile child sees them (structure, memory
// section, custom sections): none may panic or loop on any input, since
// a panic there stops the node. Seeds: the shipped and hostile modules.
func FuzzModuleChecks(f *testing.F) {
	for _, name := range []string{"fixtures/empty-route.wasm", "jitter-threshold.wasm", "hostile/grow.wasm", "hostile/trap.wasm", "hostile/memory-cap.wasm"} {
		f.Add(testdata(f, name))
	}
	for _, sh := range wasmtest.HostileShapes() {
		if len(sh.Module) < 4096 {
			f.Add(sh.Module)
		}
	}
	var lim Limits
	lim.setDefaults()
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = checkStructure(b, lim)
		_ = checkMemorySection(b, DefaultMaxMemoryPages)
		_ = withoutCustomSections(b)
	})
}

// TestTrialRefusesLabelsOverTheCaps: a real call with client labels or a
// zone over the caps never reaches the guest (ABI.md: the fail mode
// answers it), so `policy test` does not run the guest on them either: it
// says the input is over a cap rather than show an answer no real read
// would get.
func TestTrialRefusesLabelsOverTheCaps(t *testing.T) {
	h := newHost(t, HostConfig{})
	m := mustValidate(t, h, watWith(t, trapOnMarker))
	defer m.Close()
	route := encode(t, zonedRoute())
	for name, client := range map[string]map[int]any{
		"label": {3: map[string]string{"k": "MARKER12" + strings.Repeat("x", MaxClientLabelBytes)}},
		"zone":  {2: "MARKER12" + strings.Repeat("z", MaxClientZoneBytes)},
	} {
		input := encode(t, map[int]any{1: client, 2: "t", 3: cbor.RawMessage(route), 4: 1, 5: 2})
		_, _, err := m.Trial(context.Background(), HookRouteFilter, input, DefaultMinThreshold, DefaultMaxThreshold)
		if !errors.Is(err, ErrBadInput) {
			t.Errorf("trial with a %s over the cap: %v, want ErrBadInput (no guest call)", name, err)
		}
	}
}

// TestDryRunRetriesAMissedVersionCallOnce: the dry run's very first call,
// edgereg_abi_version on a fresh instance, missing its deadline once (a
// loaded node) does not refuse a valid module either.
func TestDryRunRetriesAMissedVersionCallOnce(t *testing.T) {
	h := newHost(t, HostConfig{}) // 2 s per call: only the spinning calls wait for it
	b := watWith(t, `(module `+abiPrelude+okFilter+`
  (func (export "spin") (result i32) (loop $l (br $l)) (i32.const 1)))`)
	var calls atomic.Int64
	testHookCallI32Name = func(name string) string {
		if calls.Add(1) == 1 {
			return "spin" // the first call misses its deadline
		}
		return name
	}
	t.Cleanup(func() { testHookCallI32Name = nil })
	m, err := h.Validate(context.Background(), b)
	if err != nil {
		t.Fatalf("a module whose first version call missed its deadline once: %v", err)
	}
	m.Close()
	testHookCallI32Name = func(string) string { return "spin" }
	m, err = h.Validate(context.Background(), tagModule(b, "always"))
	if m != nil {
		m.Close()
	}
	if !errors.Is(err, ErrDryRun) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("a version call missing every deadline: %v, want a dry-run refusal naming the deadline", err)
	}
}

// initWritesThenLoops is a route module whose _initialize writes 5 bytes
// to stdout (so the test counts instantiations) and then loops until its
// deadline: refused at every dry run, each costing the init deadline.
const initWritesThenLoops = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))` + abiPrelude + okFilter + `
  (data (i32.const 2048) "hello")
  (func (export "_initialize")
    (i32.store (i32.const 2100) (i32.const 2048)) (i32.store (i32.const 2104) (i32.const 5))
    (drop (call $w (i32.const 1) (i32.const 2100) (i32.const 1) (i32.const 2108)))
    (loop $l (br $l))))`

// TestLoadDirBacksOffADryRunRefusal: a policy directory file refused at
// its dry run is loaded again every 10 s while it is there (the refusal
// may be the node's load), and each dry run of a module that loops in
// _initialize costs its 2 s init deadline: 20% of a core for as long as
// the file stays. The directory loader tries the same bytes again with a
// backoff instead (10 s, doubling, at most 5 min); a changed file is
// tried at once.
func TestLoadDirBacksOffADryRunRefusal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "route.wasm")
	b := watWith(t, initWritesThenLoops)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHost(t, HostConfig{InitTimeout: 2 * time.Second}) // only the loop waits for it
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s := newSet(t, h, SetConfig{Now: func() time.Time { return time.Unix(0, now.Load()) }})
	dryRuns := func() uint64 { return h.GuestOutputBytes() / 5 }
	load := func() error {
		t.Helper()
		err := s.LoadDir(context.Background(), dir)
		if err == nil || s.Active(HookRouteFilter) {
			t.Fatalf("a module that loops in _initialize: LoadDir = %v, active %v", err, s.Active(HookRouteFilter))
		}
		return err
	}
	for range 3 { // three reloads 10 s apart... at the same instant
		load()
	}
	if n := dryRuns(); n != 1 {
		t.Fatalf("%d dry runs for 3 loads within the backoff, want 1", n)
	}
	if err := load(); !strings.Contains(err.Error(), "_initialize") && !strings.Contains(err.Error(), "initialize") {
		t.Errorf("a load within the backoff says %v, want the refusal's reason", err)
	}
	now.Add(int64(11 * time.Second))
	load()
	if n := dryRuns(); n != 2 {
		t.Fatalf("%d dry runs after the first backoff, want 2", n)
	}
	now.Add(int64(11 * time.Second)) // within the doubled backoff, 20 s
	load()
	if n := dryRuns(); n != 2 {
		t.Fatalf("%d dry runs within the doubled backoff, want 2", n)
	}
	// A changed file is tried at once.
	if err := os.WriteFile(path, tagModule(b, "changed"), 0o600); err != nil {
		t.Fatal(err)
	}
	load()
	if n := dryRuns(); n != 3 {
		t.Fatalf("%d dry runs after the file changed, want 3", n)
	}
}
