//go:build unix

package wasm

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A change made while saved policies are still being restored in the
// background (a --policy-dir loaded at start, an operator's push right
// after a restart) must not drop the hooks not restored yet from the
// manifest, or the next restart loses them. The saved module is a FIFO
// here, so the restore is held in its open until the test, after its
// change, opens it to write the module.
func TestChangeDuringBackgroundRestoreKeepsPendingHooks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	st, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, HostConfig{})
	jitter := testdata(t, "jitter-threshold.wasm")
	s := newSet(t, h, SetConfig{Store: st})
	activate(t, s, HookExpiryThreshold, load(t, h, "jitter-threshold.wasm"))
	saved := activeHash(s, HookExpiryThreshold)
	s.Close()

	path := filepath.Join(dir, saved+".wasm")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("no FIFO: %v", err)
	}

	s2 := newSet(t, h, SetConfig{Store: st, RestoreInBackground: true})
	activate(t, s2, HookRouteFilter, load(t, h, "fixtures/empty-route.wasm"))
	wrote := make(chan error, 1)
	go func() {
		// Blocks until the restore opens the FIFO to read it.
		fifo, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			_, err = fifo.Write(jitter)
			fifo.Close()
		}
		wrote <- err
	}()
	select {
	case <-s2.Restored():
	case <-time.After(time.Minute):
		if r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			defer r.Close() // releases the writer
		}
		t.Fatal("restore did not finish")
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if got := activeHash(s2, HookExpiryThreshold); got != saved {
		t.Errorf("expiry policy after the restore: %q, want %s", got, saved)
	}
	man, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	if e := man.Hooks["expiry"]; e.Active != saved {
		t.Errorf("manifest after a change during the restore: %+v, want expiry %s still named", man.Hooks, saved)
	}
}
