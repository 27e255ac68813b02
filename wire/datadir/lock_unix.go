//go:build unix

package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// LockFile is the file in a data directory that Lock holds.
const LockFile = "lock"

// ErrInUse is Lock's error when another process, or another holder in
// this one, has the directory.
var ErrInUse = errors.New("in use by another node")

// Lock takes the data directory for this holder alone: an exclusive
// flock(2) on DIR/lock, which the kernel drops when the holder exits, so a
// killed node leaves no stale lock. It fails at once with ErrInUse while
// another holder has it. On a file system that has no locks it takes
// nothing and succeeds. release gives it up.
func Lock(dir string) (release func() error, err error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EOPNOTSUPP) {
			// A file system without locks (some network ones): the node
			// runs unguarded rather than not at all.
			return f.Close, nil
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s %w (it holds %s)", dir, ErrInUse, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f.Close, nil // closing the file drops the lock
}
