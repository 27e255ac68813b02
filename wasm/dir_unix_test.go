//go:build unix

package wasm

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLoadDirRefusesNonRegularFiles: a FIFO named route.wasm in the policy
// directory blocked the opening of it forever (no writer), and with it
// every later reload of the directory; a device such as /dev/zero would
// be read up to the size cap. Only regular files are read.
func TestLoadDirRefusesNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "route.wasm"), 0o600); err != nil {
		t.Skip("mkfifo:", err)
	}
	s := newSet(t, newHost(t, HostConfig{}), SetConfig{})
	done := make(chan error, 1)
	go func() { done <- s.LoadDir(context.Background(), dir) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("LoadDir = %v, want a refusal of the FIFO", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("LoadDir still blocked on the FIFO after 30 s")
	}
}
