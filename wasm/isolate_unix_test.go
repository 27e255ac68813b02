//go:build unix

package wasm

import (
	"context"
	"errors"
	"syscall"
	"testing"
)

// TestCompileCacheWriteFailureIsNotARefusal: a compile child that could
// not write the compiled code to the cache (a full disk: here a file size
// limit the child inherits) had the module refused as "not valid
// WebAssembly", and the refusal was remembered, so the same module was
// refused again after the disk was freed, until the node restarted. A
// failure to write is the node's, not the module's: it is said as such
// and the next push compiles afresh.
func TestCompileCacheWriteFailureIsNotARefusal(t *testing.T) {
	module := testdata(t, "zone-affinity.wasm") // compiles to several MiB
	h := newHost(t, HostConfig{CacheDir: t.TempDir()})
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	small := old
	small.Cur = 1 << 20
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &small); err != nil {
		t.Fatal(err)
	}
	m, err := h.Validate(context.Background(), module)
	if rerr := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); rerr != nil {
		t.Fatal(rerr)
	}
	if m != nil {
		m.Close()
		t.Fatal("Validate succeeded with a cache it could not write")
	}
	if errors.Is(err, ErrMalformed) {
		t.Errorf("cache write failure: %v, want no \"not valid WebAssembly\"", err)
	}
	m, err = h.Validate(context.Background(), module)
	if err != nil {
		t.Fatalf("Validate once the cache can be written again: %v", err)
	}
	m.Close()
}
