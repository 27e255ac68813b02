package datadir

import (
	"os"
	"path/filepath"
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
