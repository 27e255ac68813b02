package pki

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// allocated is how many bytes f allocated on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHugeCredentialFilesAreRefusedUnread: a revocation list or CA bundle
// far larger than any real one (a path pointed at the wrong file, a disk
// image, a runaway generator) is refused with its size, not read whole
// into memory: the node reads these files again at every change, with
// every handshake waiting. Before, 256 MiB of file were 256 MiB of heap
// before the parse failed, and /dev/zero was read until memory ran out.
func TestHugeCredentialFilesAreRefusedUnread(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(256 << 20); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	l := ensureLocal(t, t.TempDir())
	for name, load := range map[string]func() error{
		"revocation list":  func() error { _, err := LoadRevocationsFrom(huge, []*x509.Certificate{l.CA}); return err },
		"client CA bundle": func() error { _, err := readCertsFile(huge); return err },
		// A device never ends: read whole, it took every byte of memory.
		"/dev/zero as the revocation list": func() error { _, err := LoadRevocations("/dev/zero"); return err },
	} {
		var err error
		if n := allocated(func() { err = load() }); n > 64<<20 || err == nil {
			t.Errorf("%s of 256 MiB: %d MiB allocated, error %v; want it refused for its size, unread", name, n>>20, err)
		}
	}
}
