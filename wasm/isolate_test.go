package wasm

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wasm/wasmtest"
)

// TestIsolatedCompileOfShippedModule compiles a 2 MB Go module in a child
// process into a fresh cache: the node's own compilation is then a cache
// load, and the child's peak memory is what DefaultCompileMemory must
// cover.
func TestIsolatedCompileOfShippedModule(t *testing.T) {
	h := newHost(t, HostConfig{CacheDir: t.TempDir()})
	start := time.Now()
	m, err := h.Validate(context.Background(), testdata(t, "zone-affinity.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	peak := h.childPeak.Load()
	t.Logf("zone-affinity.wasm validated in %v; compile child peak RSS %d MiB", time.Since(start).Round(time.Millisecond), peak>>20)
	if peak == 0 {
		t.Fatal("no compile child ran")
	}
}

// TestIsolatedCompileLimits: a compilation over the child's memory or
// time limit is refused with a message naming the limit, and the node
// process never compiled the module.
//
// The memory limit is 1 MiB of address space in every build: the child
// gives a race build raceFactor times its budget, and 8 MiB was at the
// edge of what this compilation needs (its machine code alone is 7.6 MB):
// run so, the child worked 18-22 s before it died for memory, and in one
// loaded make test it finished after 20.5 s and the module was accepted.
func TestIsolatedCompileLimits(t *testing.T) {
	module := testdata(t, "zone-affinity.wasm")
	for _, tc := range []struct {
		name  string
		cfg   HostConfig
		limit string
	}{
		{"memory", HostConfig{CompileMemory: (1 << 20) / raceFactor}, "compile memory limit"},
		{"time", HostConfig{CompileTimeout: 50 * time.Millisecond}, "compile time limit"},
	} {
		tc.cfg.CacheDir = t.TempDir()
		h := newHost(t, tc.cfg)
		start := time.Now()
		m, err := h.Validate(context.Background(), module)
		if m != nil {
			m.Close()
		}
		t.Logf("%s: refused in %v: %v", tc.name, time.Since(start).Round(time.Millisecond), err)
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), tc.limit) {
			t.Errorf("%s: Validate = %v, want a refusal naming %q", tc.name, err, tc.limit)
		}
	}
}

// TestCompiledCodeBounded: the machine code a module compiles to is
// mapped by the node for as long as it keeps the module, and wazero emits
// up to ~45 bytes of it per byte of some instructions (a 3.6 MB module of
// divisions was +156 MiB of the node's RSS, accepted). A module whose code
// is over the limit is refused, and nothing of it stays in the cache.
func TestCompiledCodeBounded(t *testing.T) {
	dir := t.TempDir()
	h := newHost(t, HostConfig{CacheDir: dir, MaxCompiledSize: 1 << 20})
	m, err := h.Validate(context.Background(), wasmtest.DivisionChain(1, 20_000))
	if m != nil {
		m.Close()
	}
	t.Logf("refused: %v", err)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "compiled code size") {
		t.Fatalf("Validate = %v, want a refusal naming the compiled code size", err)
	}
	var files []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, path)
		}
		return nil
	})
	if len(files) != 0 {
		t.Errorf("the cache holds %v after the refusal", files)
	}
	// A module within the limit compiles, once, into the shared cache.
	m, err = h.Validate(context.Background(), testdata(t, "jitter-threshold.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}
