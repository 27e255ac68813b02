//go:build unix

package datadir

import (
	"errors"
	"testing"
)

// TestLock: one holder at a time, the second told the directory is in use;
// released, the directory can be taken again.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	release, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r2, err := Lock(dir); !errors.Is(err, ErrInUse) {
		if r2 != nil {
			r2()
		}
		t.Fatalf("second Lock: %v, want ErrInUse", err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	again, err := Lock(dir)
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	again()
}
