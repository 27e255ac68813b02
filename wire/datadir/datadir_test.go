package datadir

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sub")
	path := filepath.Join(dir, "key")
	for _, content := range []string{"first", "second, longer"} {
		if err := WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	// A path whose name is a directory cannot be replaced: the error names
	// it and no temporary file is left.
	if err := WriteFile(dir, []byte("x"), 0o600); err == nil {
		t.Fatal("replaced a directory")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".*tmp*")); len(left) != 0 {
		t.Fatalf("temporary files left after a failure: %v", left)
	}
}

// TestNewDirectoriesAreDurable: WriteFile created a missing directory with
// os.MkdirAll and synced only that directory after its rename, never the
// parent holding the new directory's entry: a power cut soon after a
// node's first start could lose tls/ (its CA and keys, each synced) whole,
// and the next start would make a new CA, orphaning every credential the
// first had issued. Every directory created is now synced into its
// parent.
func TestNewDirectoriesAreDurable(t *testing.T) {
	root := t.TempDir()
	var synced []string
	testHookSyncDir = func(dir string) { synced = append(synced, dir) }
	t.Cleanup(func() { testHookSyncDir = nil })
	if err := WriteFile(filepath.Join(root, "a", "b", "key"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b")} {
		if !slices.Contains(synced, want) {
			t.Errorf("%s was not synced (synced: %v): the entry of the directory created in it could be lost", want, synced)
		}
	}
	synced = nil
	if err := MkdirAll(filepath.Join(root, "a", "c"), 0o700); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "a"); !slices.Equal(synced, []string{want}) {
		t.Errorf("MkdirAll of a/c synced %v, want only %s, the parent of the one directory it created", synced, want)
	}
	synced = nil
	if err := MkdirAll(filepath.Join(root, "a", "c"), 0o700); err != nil || len(synced) != 0 {
		t.Errorf("MkdirAll of an existing directory: %v, synced %v; want nothing to do", err, synced)
	}
}
