package wasm

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestStorePersistsAcrossRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	st, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{Store: st})
	zone, empty, sp := load(t, h, "zone-affinity.wasm"), load(t, h, "fixtures/empty-route.wasm"), load(t, h, "self-preservation.wasm")
	activate(t, s, HookRouteFilter, zone)
	activate(t, s, HookRouteFilter, empty) // zone becomes last good
	activate(t, s, HookExpiryThreshold, sp)
	activate(t, s, HookExpiryConfirm, sp)
	before := s.List()
	s.Close()
	h.Close(context.Background())

	files, _ := filepath.Glob(filepath.Join(dir, "*.wasm"))
	if len(files) != 3 {
		t.Errorf("saved modules %v, want 3", files)
	}
	h2 := newHost(t, HostConfig{})
	s2 := newSet(t, h2, SetConfig{Store: st})
	after := s2.List()
	for i := range before {
		b, a := before[i], after[i]
		if *b.Active != *a.Active || (b.LastGood == nil) != (a.LastGood == nil) || !b.ActivatedAt.Equal(a.ActivatedAt) {
			t.Errorf("%s: before %+v, after %+v", b.Hook, b, a)
		}
	}
	if _, brokers := names(filter(t, s2, "T")); len(brokers) != 0 {
		t.Errorf("restored route filter shows %v, want the empty route", brokers)
	}

	// Modules no longer named are pruned.
	if err := s2.Remove(HookExpiryThreshold); err != nil {
		t.Fatal(err)
	}
	if err := s2.Remove(HookExpiryConfirm); err != nil { // sp stays as last good
		t.Fatal(err)
	}
	if err := s2.Rollback(HookRouteFilter); err != nil { // zone active, empty last good
		t.Fatal(err)
	}
	activate(t, s2, HookRouteFilter, load(t, h2, "fixtures/empty-route.wasm")) // empty active, zone last good
	man, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	if e := man.Hooks["route"]; e.Active != empty.Hash() || e.LastGood != zone.Hash() {
		t.Errorf("manifest %+v", man)
	}
	files, _ = filepath.Glob(filepath.Join(dir, "*.wasm"))
	if len(files) != 3 {
		t.Errorf("saved modules %v, want 3", files)
	}
}

func TestStoreRejectsCorruptModule(t *testing.T) {
	dir := t.TempDir()
	st, _ := OpenStore(dir)
	h := newHost(t, HostConfig{})
	m := load(t, h, "jitter-threshold.wasm")
	s := newSet(t, h, SetConfig{Store: st})
	activate(t, s, HookExpiryThreshold, m)
	s.Close()
	if err := os.WriteFile(filepath.Join(dir, m.Hash()+".wasm"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := newSet(t, h, SetConfig{Store: st}) // logs and starts without it
	if got := activeHash(s2, HookExpiryThreshold); got != "" {
		t.Errorf("corrupt module restored as %s", got)
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(testdata(t, "self-preservation.wasm"))
	zw.Close()
	write("route.wasm", testdata(t, "zone-affinity.wasm"))
	write("expiry_confirm.wasm.gz", gz.Bytes())
	write("README.md", []byte("ignored"))
	write(".hidden.wasm", []byte("ignored"))
	os.Mkdir(filepath.Join(dir, "..data"), 0o700) // as a ConfigMap mount has

	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{})
	if err := s.LoadDir(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	zone, sp := load(t, h, "zone-affinity.wasm"), load(t, h, "self-preservation.wasm")
	want := []string{zone.Hash(), sp.Hash(), sp.Hash()}
	got := []string{activeHash(s, HookRouteFilter), activeHash(s, HookExpiryThreshold), activeHash(s, HookExpiryConfirm)}
	if !slices.Equal(got, want) {
		t.Errorf("active %v, want %v", got, want)
	}
	at := status(s, HookRouteFilter).ActivatedAt

	// A bad file is reported; the others still load, and unchanged ones
	// are left alone.
	write("router.wasm", []byte("x"))
	time.Sleep(time.Millisecond)
	if err := s.LoadDir(context.Background(), dir); err == nil {
		t.Error("unknown hook name not reported")
	}
	if st := status(s, HookRouteFilter); !st.ActivatedAt.Equal(at) {
		t.Error("an unchanged module was activated again")
	}
}

func TestParsePolicyFileName(t *testing.T) {
	tests := []struct {
		name  string
		hooks []Hook
		gz    bool
		ok    bool
		err   bool
	}{
		{"route.wasm", []Hook{HookRouteFilter}, false, true, false},
		{"expiry-threshold.wasm.gz", []Hook{HookExpiryThreshold}, true, true, false},
		{"expiry_confirm.wasm", []Hook{HookExpiryThreshold, HookExpiryConfirm}, false, true, false},
		{"..data", nil, false, false, false},
		{"notes.txt", nil, false, false, false},
		{"routes.wasm", nil, false, true, true},
	}
	for _, tt := range tests {
		hooks, gz, ok, err := parsePolicyFileName(tt.name)
		if !slices.Equal(hooks, tt.hooks) || gz != tt.gz || ok != tt.ok || (err != nil) != tt.err {
			t.Errorf("%s: %v %v %v %v", tt.name, hooks, gz, ok, err)
		}
	}
}

// TestLoadDirRemembersRefusals: the node loads its policy directory again
// every 10 s while a file in it is refused. A module refused before its
// dry run is refused the same way every time, so it is not compiled again:
// before, a module at the compile time limit cost a compile child of 60 s
// (a core and a compile slot) at every reload, for as long as the file
// stayed.
func TestLoadDirRemembersRefusals(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "route.wasm"), testdata(t, "zone-affinity.wasm"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A compile time limit of 50 ms stands in for a module that takes
	// 60 s to compile.
	h := newHost(t, HostConfig{CacheDir: t.TempDir(), CompileTimeout: 50 * time.Millisecond})
	s := newSet(t, h, SetConfig{})
	for i := range 3 {
		err := s.LoadDir(context.Background(), dir)
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "compile time limit") {
			t.Fatalf("load %d: %v, want a refusal naming the compile time limit", i+1, err)
		}
	}
	if n := h.childRuns.Load(); n != 1 {
		t.Errorf("%d compile children for 3 loads of the same refused module, want 1", n)
	}
	if s.Active(HookRouteFilter) {
		t.Error("the refused module is active")
	}
}

// TestLoadDirKeepsOperatorChanges: while a file of the policy directory
// is refused, the node loads the directory again every 10 s; the files
// that did not change must not be activated again. Before, every reload
// activated them again, undoing within 10 s an operator's rm, rollback or
// push for their hooks, and reactivating a module deactivated for its
// failures.
func TestLoadDirKeepsOperatorChanges(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("route.wasm", testdata(t, "fixtures/empty-route.wasm"))
	write("expiry.wasm", testdata(t, "self-preservation.wasm"))
	write("confirm.wasm", []byte("\x00asm\x01\x00\x00\x00garbage")) // refused at every load
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{})
	if err := s.LoadDir(context.Background(), dir); err == nil {
		t.Fatal("the refused confirm.wasm was not reported")
	}
	empty := load(t, h, "fixtures/empty-route.wasm")
	if got := activeHash(s, HookRouteFilter); got != empty.Hash() {
		t.Fatalf("route %q after the first load, want %s", got, empty.Hash())
	}
	// The operator removes the route policy and pushes another expiry one.
	if err := s.Remove(HookRouteFilter); err != nil {
		t.Fatal(err)
	}
	jitter := load(t, h, "jitter-threshold.wasm")
	activate(t, s, HookExpiryThreshold, jitter)
	if err := s.LoadDir(context.Background(), dir); err == nil {
		t.Fatal("the refused confirm.wasm was not reported")
	}
	if got := activeHash(s, HookRouteFilter); got != "" {
		t.Errorf("route %.12s active again after a reload of the unchanged route.wasm, want removed", got)
	}
	if got := activeHash(s, HookExpiryThreshold); got != jitter.Hash() {
		t.Errorf("expiry %.12s after a reload of the unchanged expiry.wasm, want the pushed %.12s", got, jitter.Hash())
	}
	// A file that changes still wins.
	write("route.wasm", testdata(t, "zone-affinity.wasm"))
	s.LoadDir(context.Background(), dir)
	zone := load(t, h, "zone-affinity.wasm")
	if got := activeHash(s, HookRouteFilter); got != zone.Hash() {
		t.Errorf("route %.12s after route.wasm changed, want %.12s", got, zone.Hash())
	}
	// So does a file put back after it was removed.
	if err := os.Remove(filepath.Join(dir, "route.wasm")); err != nil {
		t.Fatal(err)
	}
	s.LoadDir(context.Background(), dir)
	if err := s.Remove(HookRouteFilter); err != nil {
		t.Fatal(err)
	}
	write("route.wasm", testdata(t, "zone-affinity.wasm"))
	s.LoadDir(context.Background(), dir)
	if got := activeHash(s, HookRouteFilter); got != zone.Hash() {
		t.Errorf("route %.12s after route.wasm was put back, want %.12s", got, zone.Hash())
	}
}

// TestStoreRepairsCorruptModule: a saved module whose file is corrupt is
// not restored; the operator pushes the same module again, and it must
// then survive the next restart. Before, saving skipped a module whose
// file existed ("content-addressed: present means identical"), so the
// corrupt file stayed and the module was lost at every restart while the
// push had said it was activated.
func TestStoreRepairsCorruptModule(t *testing.T) {
	dir := t.TempDir()
	st, _ := OpenStore(dir)
	h := newHost(t, HostConfig{})
	m := load(t, h, "jitter-threshold.wasm")
	s := newSet(t, h, SetConfig{Store: st})
	activate(t, s, HookExpiryThreshold, m)
	s.Close()
	path := filepath.Join(dir, m.Hash()+".wasm")
	if err := os.WriteFile(path, m.Bytes()[:len(m.Bytes())/2], 0o600); err != nil { // torn
		t.Fatal(err)
	}
	s2 := newSet(t, h, SetConfig{Store: st})
	if got := activeHash(s2, HookExpiryThreshold); got != "" {
		t.Fatalf("corrupt module restored as %s", got)
	}
	activate(t, s2, HookExpiryThreshold, m) // pushed again
	s2.Close()
	s3 := newSet(t, h, SetConfig{Store: st})
	if got := activeHash(s3, HookExpiryThreshold); got != m.Hash() {
		t.Errorf("after the module was pushed again and the node restarted: active %q, want %s", got, m.Hash())
	}
}

// slowInitThreshold is a threshold policy (always 120 s) whose
// _initialize takes a while, so restoring it takes a while.
const slowInitThreshold = `(module ` + abiPrelude + `
  (data (i32.const 128) "\a1\01\1a\00\01\d4\c0")
  (global $sink (mut i32) (i32.const 0))
  (func (export "_initialize") (local i32)
    (loop $l (local.set 0 (i32.add (local.get 0) (i32.const 1)))
      (global.set $sink (local.get 0))
      (br_if $l (i32.lt_u (local.get 0) (i32.const 20000000)))))
  (func (export "edgereg_expiry_threshold") (param i32 i32) (result i64) (i64.const 0x0000008000000007)))`

// TestStoreKeepsModulesRestoredLate: a node restores its saved policies
// in the background, and an operator may change another hook meanwhile.
// That change saved the manifest from the hooks restored so far and
// pruned the files of the others, so a module restored after it was
// active but no longer saved, lost at the next restart (and a hook whose
// file was pruned before its restore read it was lost at once).
func TestStoreKeepsModulesRestoredLate(t *testing.T) {
	b := wat(t, slowInitThreshold)
	if b == nil {
		t.Skip("wat2wasm not installed")
	}
	dir := t.TempDir()
	st, _ := OpenStore(dir)
	h := newHost(t, HostConfig{InitTimeout: time.Minute, PoolSize: 1})
	slow, err := h.Validate(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	s := newSet(t, h, SetConfig{Store: st})
	activate(t, s, HookExpiryThreshold, slow)
	s.Close()

	slow.Close()
	// A new host, as after a restart: the restore validates the module
	// again, its dry run with it.
	h2 := newHost(t, HostConfig{InitTimeout: time.Minute, PoolSize: 1})
	var logs strings.Builder
	var logMu sync.Mutex
	s2 := newSet(t, h2, SetConfig{Store: st, RestoreInBackground: true,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))})
	activate(t, s2, HookRouteFilter, load(t, h2, "fixtures/empty-route.wasm")) // while the threshold policy is restored
	select {
	case <-s2.Restored():
		t.Skip("the restore finished before the operator's change; nothing to check")
	default:
	}
	<-s2.Restored()
	if got := activeHash(s2, HookExpiryThreshold); got != slow.Hash() {
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("expiry %q after the restore, want %s; log:\n%s", got, slow.Hash(), logs.String())
	}
	s2.Close()
	s3 := newSet(t, h2, SetConfig{Store: st})
	if got := activeHash(s3, HookExpiryThreshold); got != slow.Hash() {
		t.Errorf("after the next restart: expiry %q, want %.12s", got, slow.Hash())
	}
}

// TestStoreKeepsModulesNotRestored: a saved module whose restore fails
// (here its _initialize passes a deadline the restarted node's host sets
// shorter; a loaded machine does the same to a dry run's 20 ms calls)
// stays saved: the next change of another hook saved the manifest
// without it and pruned its file, so one failed restore lost the
// operator's policy for good. It is tried again at the next restart.
func TestStoreKeepsModulesNotRestored(t *testing.T) {
	b := wat(t, slowInitThreshold)
	if b == nil {
		t.Skip("wat2wasm not installed")
	}
	dir := t.TempDir()
	st, _ := OpenStore(dir)
	h := newHost(t, HostConfig{InitTimeout: time.Minute, PoolSize: 1})
	slow, err := h.Validate(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	s := newSet(t, h, SetConfig{Store: st})
	activate(t, s, HookExpiryThreshold, slow)
	s.Close()
	slow.Close()

	h2 := newHost(t, HostConfig{InitTimeout: 50 * time.Millisecond, PoolSize: 1})
	s2 := newSet(t, h2, SetConfig{Store: st})
	if got := activeHash(s2, HookExpiryThreshold); got != "" {
		t.Fatalf("expiry %.12s restored within an init deadline it cannot meet", got)
	}
	// List says what is saved and why it is not in use.
	if st := s2.List()[HookExpiryThreshold]; st.Saved != slow.Hash() || st.SavedError == "" {
		t.Errorf("expiry not restored: List says saved %.12s, error %q; want %.12s and why", st.Saved, st.SavedError, slow.Hash())
	}
	activate(t, s2, HookRouteFilter, load(t, h2, "fixtures/empty-route.wasm"))
	s2.Close()

	h3 := newHost(t, HostConfig{InitTimeout: time.Minute, PoolSize: 1})
	s3 := newSet(t, h3, SetConfig{Store: st})
	if got := activeHash(s3, HookExpiryThreshold); got != slow.Hash() {
		t.Errorf("after a restart that could not restore it and a change of another hook: expiry %q, want %.12s", got, slow.Hash())
	}
	if got := activeHash(s3, HookRouteFilter); got == "" {
		t.Error("the route policy pushed meanwhile was not restored")
	}
	s3.Close()

	// An operator's rm of a hook that could not be restored is its
	// removal: it is not restored at the next start.
	s4 := newSet(t, h2, SetConfig{Store: st})
	if err := s4.Remove(HookExpiryThreshold); err != nil {
		t.Fatal(err)
	}
	s4.Close()
	s5 := newSet(t, h3, SetConfig{Store: st})
	if got := activeHash(s5, HookExpiryThreshold); got != "" {
		t.Errorf("expiry %.12s restored after the operator removed it", got)
	}
	if st := s5.List()[HookExpiryThreshold]; st.Saved != "" {
		t.Errorf("after rm, List still says expiry %.12s is saved", st.Saved)
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A manifest that does not parse stops the start with its error: starting
// with no policies would let the next change overwrite it and prune every
// module it named.
func TestCorruptManifestRefusedAtStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	st, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{Store: st})
	activate(t, s, HookExpiryThreshold, load(t, h, "jitter-threshold.wasm"))
	s.Close()
	if err := os.WriteFile(filepath.Join(dir, manifestName), []byte(`{"version": 1, "hooks": {`), 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := NewSet(context.Background(), h, SetConfig{Store: st, RestoreInBackground: true})
	if err == nil {
		s2.Close()
		t.Fatal("NewSet with a truncated manifest succeeded")
	}
	if !strings.Contains(err.Error(), manifestName) {
		t.Errorf("error %q does not name the manifest", err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.wasm")); len(files) != 1 {
		t.Errorf("saved modules %v, want the one still there", files)
	}
}

// TestDamagedCompilationCacheRecompiles: a compiled module's entry in the
// compilation cache (DATA/wasm-cache) cut short or damaged (a disk fault,
// a copy of the data directory interrupted) made the module "not valid
// WebAssembly": the saved policy was not restored at the next start, and
// a push of the same module was refused for as long as the node ran. The
// cache is only a cache: the module is compiled again.
func TestDamagedCompilationCacheRecompiles(t *testing.T) {
	cache := t.TempDir()
	for _, inProcess := range []bool{false, true} {
		h := newHost(t, HostConfig{CacheDir: cache, CompileInProcess: inProcess})
		m, err := h.Validate(context.Background(), testdata(t, "jitter-threshold.wasm"))
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
		h.Close(context.Background())
		damaged := 0
		filepath.WalkDir(cache, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if fi, _ := d.Info(); fi != nil && fi.Size() > 64 {
					os.Truncate(p, 64)
					damaged++
				}
			}
			return nil
		})
		if damaged == 0 {
			t.Fatal("no compiled code in the cache to damage")
		}
		h2 := newHost(t, HostConfig{CacheDir: cache, CompileInProcess: inProcess})
		m2, err := h2.Validate(context.Background(), testdata(t, "jitter-threshold.wasm"))
		if err != nil {
			t.Fatalf("in process %v: a module whose cache entry is damaged: %v", inProcess, err)
		}
		m2.Close()
	}
}

// TestPolicyDirDoesNotUndoAPushAtRestart: a module pushed over the one
// --policy-dir gave a hook (a hotfix, on a node whose ConfigMap still
// holds the old module) was replaced by the directory's at every restart,
// though the directory had not changed: the push, acknowledged, did not
// survive a restart; nor did a policy rm. The directory's file wins when
// it changes, and a file removed and put back is a change, across
// restarts too.
func TestPolicyDirDoesNotUndoAPushAtRestart(t *testing.T) {
	store, err := OpenStore(filepath.Join(t.TempDir(), "policies"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "route.wasm")
	write := func(name string) {
		if err := os.WriteFile(file, testdata(t, name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("fixtures/empty-route.wasm")
	h := newHost(t, HostConfig{})
	zone, empty, other := load(t, h, "zone-affinity.wasm"), load(t, h, "fixtures/empty-route.wasm"), load(t, h, "hostile/add-broker.wasm")
	// start is a node's start: the saved policies restored in the
	// background while the directory is loaded.
	start := func() *Set {
		t.Helper()
		s := newSet(t, h, SetConfig{Store: store, RestoreInBackground: true})
		if err := s.LoadDir(context.Background(), dir); err != nil {
			t.Fatal(err)
		}
		select {
		case <-s.Restored():
		case <-time.After(time.Minute):
			t.Fatal("restore did not finish")
		}
		return s
	}

	s := start()
	activate(t, s, HookRouteFilter, zone) // the operator's push
	s.Close()
	for restart := range 2 {
		s = start()
		if got := activeHash(s, HookRouteFilter); got != zone.Hash() {
			t.Fatalf("restart %d: route policy %.12s, want the pushed %.12s (the directory's is %.12s and has not changed)",
				restart+1, got, zone.Hash(), empty.Hash())
		}
		s.Close()
	}

	// A changed file wins, at once and after a restart.
	write("hostile/add-broker.wasm")
	s = start()
	if got := activeHash(s, HookRouteFilter); got != other.Hash() {
		t.Fatalf("after the directory changed: route policy %.12s, want its new module %.12s", got, other.Hash())
	}
	// An rm survives a restart too.
	if err := s.Remove(HookRouteFilter); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = start()
	if got := activeHash(s, HookRouteFilter); got != "" {
		t.Fatalf("after an rm and a restart: route policy %.12s, want none", got)
	}
	// The file removed, the node restarted, the file put back: a change.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := s.LoadDir(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = start()
	s.Close()
	write("hostile/add-broker.wasm")
	s = start()
	if got := activeHash(s, HookRouteFilter); got != other.Hash() {
		t.Fatalf("route.wasm removed and put back across restarts: route policy %.12s, want %.12s", got, other.Hash())
	}
	// So is a directory given again to a node started without one since.
	activate(t, s, HookRouteFilter, zone)
	s.Close()
	s = newSet(t, h, SetConfig{Store: store})
	if err := s.ForgetDir(); err != nil { // as a node without --policy-dir does
		t.Fatal(err)
	}
	s.Close()
	s = start()
	if got := activeHash(s, HookRouteFilter); got != other.Hash() {
		t.Fatalf("--policy-dir given again after a start without it: route policy %.12s, want the directory's %.12s", got, other.Hash())
	}
}
