// Package datadir writes the files of a node's data directory — its
// identity, keys, local CA, KV config and policies — so that a crash leaves
// either the old file or the complete new one, never a torn write.
package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// WriteFile replaces path with data atomically: it writes a temporary file
// in the same directory with mode perm, syncs it, renames it over path and
// syncs the directory, creating the directory (0700) if needed.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	if err := MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	// Set the mode before any byte is written, so a key is never readable
	// by others even for a moment.
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

// MkdirAll creates dir and its missing parents with perm, as os.MkdirAll
// does, and makes each directory it created durable by syncing the
// directory that holds it: the files written into a new directory are
// synced, but without its parent's entry a crash could lose them with it
// (a node's tls/ after its first start, and with it its CA).
func MkdirAll(dir string, perm os.FileMode) error {
	var created []string // missing, innermost first
	for d := filepath.Clean(dir); ; {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		created = append(created, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if len(created) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	for i := len(created) - 1; i >= 0; i-- {
		if err := syncDir(filepath.Dir(created[i])); err != nil {
			return fmt.Errorf("sync %s: %w", filepath.Dir(created[i]), err)
		}
	}
	return nil
}

// syncDir makes a rename in dir durable. Windows cannot fsync directories.
func syncDir(dir string) error {
	if testHookSyncDir != nil {
		testHookSyncDir(dir)
	}
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// CleanTemps removes the temporary files WriteFile leaves in dir when its
// process dies between creating one and renaming it over its target (a
// kill -9, a power cut): they are never read, and would otherwise pile up
// with every crash. Call it at start, with the directory's lock held (see
// Lock), so no WriteFile in dir is in progress.
// It looks in dir and its subdirectories (the TLS directory) and removes
// only regular files named as WriteFile names them.
func CleanTemps(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("clean temporary files: %w", err)
		case !d.Type().IsRegular() || !isTemp(d.Name()):
			return nil
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("clean temporary files: %w", err)
		}
		return nil
	})
}

// isTemp reports whether name is one of WriteFile's temporary files:
// "." + the target's name + ".tmp" + the digits os.CreateTemp adds.
func isTemp(name string) bool {
	i := strings.LastIndex(name, ".tmp")
	if len(name) < 2 || name[0] != '.' || i < 2 || i+4 == len(name) {
		return false
	}
	for _, c := range name[i+4:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// testHookSyncDir, when set, is told of every directory syncDir syncs;
// tests use it to check that what a crash could lose is synced.
var testHookSyncDir func(dir string)
