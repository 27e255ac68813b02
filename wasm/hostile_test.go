package wasm

import (
	"context"
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wasm/wasmtest"
)

// rssBytes reads the process's resident set size.
func rssBytes(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm")
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// peakRSS samples the RSS while fn runs and returns the largest growth.
func peakRSS(t testing.TB, fn func()) int64 {
	runtime.GC()
	debug.FreeOSMemory()
	base := rssBytes(t)
	var peak atomic.Int64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), rssBytes(t)-base))
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	fn()
	close(done)
	<-sampled
	return max(peak.Load(), rssBytes(t)-base)
}

// TestHostileStructureRefused uploads each shape to a host: each is
// refused, with a message naming the limit, before wazero decodes it, and
// the process's memory stays where it was.
func TestHostileStructureRefused(t *testing.T) {
	h := newHost(t, HostConfig{CacheDir: t.TempDir()})
	for _, sh := range wasmtest.HostileShapes() {
		if f := os.Getenv("HOSTILE_ONLY"); f != "" && !strings.Contains(f, sh.Name) {
			continue
		}
		var err error
		var took time.Duration
		grew := peakRSS(t, func() {
			start := time.Now()
			var m *Module
			m, err = h.Validate(context.Background(), sh.Module)
			took = time.Since(start)
			if m != nil {
				m.Close()
			}
		})
		t.Logf("%-22s %8d bytes: refused in %v, RSS +%d MiB: %v", sh.Name, len(sh.Module), took.Round(time.Microsecond), grew>>20, err)
		var ve *ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), sh.Limit) {
			t.Errorf("%s: Validate = %v, want a refusal naming %q", sh.Name, err, sh.Limit)
		}
		if grew > 64<<20 {
			t.Errorf("%s: RSS grew by %d MiB during the refusal", sh.Name, grew>>20)
		}
	}
}

// recursion is a route filter that calls itself without end, with a few
// locals per frame.
const recursion = `(module ` + abiPrelude + `
  (func $deep (param i32) (result i64) (local i64 i64 i64 i64)
    (call $deep (i32.add (local.get 0) (i32.const 1))))
  (func (export "edgereg_route_filter") (param i32 i32) (result i64)
    (call $deep (i32.const 0))))`

// TestRecursionCost measures what unbounded recursion costs: wazero has no
// stack-depth setting (its call stack may grow to 400 MB), so the bound is
// the call deadline plus the node-wide instance budget. ABI.md quotes the
// figures this logs.
func TestRecursionCost(t *testing.T) {
	b := wat(t, recursion)
	if b == nil {
		t.Skip("wat2wasm not installed")
	}
	h := newHost(t, HostConfig{CallTimeout: DefaultCallTimeout})
	// The dry run fails on the recursion itself; compile and call directly.
	m, err := h.compile(context.Background(), "recursion", b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.destroy(context.Background())
	route := encode(t, zonedRoute())
	var worst time.Duration
	var callErr error
	grew := peakRSS(t, func() {
		for range 5 {
			start := time.Now()
			_, callErr = m.FilterRoute(context.Background(), RouteFilterInput{Route: route, Rand: 1})
			worst = max(worst, time.Since(start))
		}
	})
	t.Logf("unbounded recursion: %v; slowest of 5 calls %v (deadline %v); peak RSS +%d MiB", callErr, worst.Round(time.Millisecond), DefaultCallTimeout, grew>>20)
	if !errors.Is(callErr, ErrTrap) && !errors.Is(callErr, ErrTimeout) {
		t.Fatalf("recursion: %v, want a trap or a timeout", callErr)
	}
	// One wazero stack of about 100 MB plus the copy it grows from;
	// measured +300 MiB without -race, +600 MiB with it.
	if grew > 1<<30 {
		t.Errorf("recursion grew the RSS by %d MiB", grew>>20)
	}
}

// recursionAfterDryRun passes the dry run, then recurses without end.
const recursionAfterDryRun = `(module ` + abiPrelude + `
  (func $dry (param $p i32) (param $n i32) (result i32)
    (local $i i32)
    (block $no
      (loop $scan
        (br_if $no (i32.gt_s (i32.add (local.get $i) (i32.const 8)) (local.get $n)))
        (if (i64.eq (i64.load (i32.add (local.get $p) (local.get $i))) (i64.const 0x157c4a7fb979379e))
          (then (return (i32.const 1))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $scan)))
    (i32.const 0))
  (func $deep (param i32) (result i64) (local i64 i64 i64 i64)
    (call $deep (i32.add (local.get 0) (i32.const 1))))
  (func (export "edgereg_route_filter") (param $p i32) (param $n i32) (result i64)
    (if (call $dry (local.get $p) (local.get $n)) (then (return (i64.const 0x0000004000000007))))
    (call $deep (i32.const 0))))`

// TestStackOverflowDeactivates: one stack overflow deactivates a module,
// since each costs about 100 MB of stack and runs past the deadline;
// before, it took five in a row.
func TestStackOverflowDeactivates(t *testing.T) {
	b := wat(t, recursionAfterDryRun)
	if b == nil {
		t.Skip("wat2wasm not installed")
	}
	h := newHost(t, HostConfig{})
	s := newSet(t, h, SetConfig{})
	m, err := h.Validate(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	activate(t, s, HookRouteFilter, m)
	filter(t, s, "T")
	if got := activeHash(s, HookRouteFilter); got != "" {
		t.Fatalf("still active after a stack overflow (%+v)", status(s, HookRouteFilter))
	}
}

// TestDebugInfoNotRead: a module's DWARF sections are not read. wazero
// reads them by default to name the source line of every frame of a
// trap: on the first trap it decoded the whole line program of the
// compilation unit and kept it with the module. A 3.9 MB module whose
// route filter traps took 3.4 s for that call (deadline 20 ms), peaked
// at +1.6 GiB of RSS and kept +477 MiB of live heap; its dry run at
// upload costs the same. Trap messages keep only their first line, so
// the source lines were never shown anyway.
func TestDebugInfoNotRead(t *testing.T) {
	b := wasmtest.DebugInfoBomb(3_900_000)
	h := newHost(t, HostConfig{CacheDir: t.TempDir(), CallTimeout: DefaultCallTimeout})
	// The dry run traps; compile and call directly, as real traffic would
	// call a module that passed its dry run.
	m, err := h.compile(context.Background(), "debug-info", b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.destroy(context.Background())
	route := encode(t, zonedRoute())
	before := liveHeap()
	var callErr error
	grew := peakRSS(t, func() {
		_, callErr = m.FilterRoute(context.Background(), RouteFilterInput{Route: route, Rand: 1})
	})
	kept := liveHeap() - before
	t.Logf("%d-byte module: %v; peak RSS +%d MiB, live heap kept +%d MiB", len(b), callErr, grew>>20, kept>>20)
	if !errors.Is(callErr, ErrTrap) {
		t.Fatalf("call = %v, want a trap", callErr)
	}
	if grew > 128<<20 || kept > 32<<20 {
		t.Errorf("one trap grew the RSS by %d MiB and kept %d MiB of live heap", grew>>20, kept>>20)
	}
}

// TestNamesNotKept: wazero reads a module's name section, sizing its
// tables by the counts the section declares, keeps them with the module,
// and writes a function's name into a trap's stack trace once per frame,
// although trap messages keep only their first line. A 3.9 MB name made
// one trapping call take 0.7 s (deadline 20 ms) and +447 MiB of RSS, and
// 2M local names in a 4 MB module kept +61 MiB of heap. Custom sections
// are now taken out of the bytes wazero compiles.
func TestNamesNotKept(t *testing.T) {
	h := newHost(t, HostConfig{CacheDir: t.TempDir(), CallTimeout: DefaultCallTimeout})
	b := wasmtest.LongNamedTrap(3_900_000)
	m, err := h.compile(context.Background(), "long-name", b) // the dry run traps
	if err != nil {
		t.Fatal(err)
	}
	defer m.destroy(context.Background())
	route := encode(t, zonedRoute())
	var callErr error
	grew := peakRSS(t, func() {
		_, callErr = m.FilterRoute(context.Background(), RouteFilterInput{Route: route, Rand: 1})
	})
	t.Logf("%d-byte module: %v; peak RSS +%d MiB", len(b), callErr, grew>>20)
	if !errors.Is(callErr, ErrTrap) {
		t.Fatalf("call = %v, want a trap", callErr)
	}
	if grew > 128<<20 {
		t.Errorf("one trap grew the RSS by %d MiB", grew>>20)
	}
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"2M local names", wasmtest.WithNames(2, 2_000_000, 2_000_000, []byte{5, 0})},
		{"2M function names", wasmtest.WithNames(1, 2_000_000, 2_000_000, []byte{5, 0})},
		{"2^32-1 function names declared", wasmtest.WithNames(1, 1<<32-1, 0, nil)},
	} {
		before := liveHeap()
		m, err := h.Validate(context.Background(), c.b)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		kept := liveHeap() - before
		t.Logf("%s, %d bytes: live heap +%d MiB", c.name, len(c.b), kept>>20)
		if kept > 16<<20 {
			t.Errorf("%s: the module keeps +%d MiB of heap", c.name, kept>>20)
		}
		m.Close()
	}
}
