package kv

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestStore(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		op, ns, key, value string
		want               error
	}{
		{"put", "ORDER_TOPIC_CONFIG", "orders", "b1:8;b2:8", nil},
		{"put", "ORDER_TOPIC_CONFIG", "payments", "b1:4", nil},
		{"put", "other", "k", "v", nil},
		{"put", "", "k", "v", ErrInvalid},
		{"put", "ns", "", "v", ErrInvalid},
		{"del", "other", "k", "", nil},
		{"del", "other", "k", "", ErrNotFound},
		{"get", "nope", "k", "", ErrNotFound},
	}
	for _, st := range steps {
		var err error
		switch st.op {
		case "put":
			err = s.Put(st.ns, st.key, st.value)
		case "del":
			err = s.Delete(st.ns, st.key)
		case "get":
			_, err = s.Get(st.ns, st.key)
		}
		if !errors.Is(err, st.want) {
			t.Fatalf("%s %s/%s: %v, want %v", st.op, st.ns, st.key, err, st.want)
		}
	}
	// Reload from disk: what was committed is there, nothing else.
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s2.Get("ORDER_TOPIC_CONFIG", "orders"); err != nil || v != "b1:8;b2:8" {
		t.Fatalf("after reload: %q, %v", v, err)
	}
	ns, err := s2.List("ORDER_TOPIC_CONFIG")
	if err != nil || len(ns) != 2 {
		t.Fatalf("list = %v, %v", ns, err)
	}
	// An emptied namespace stays, empty, as in RocketMQ's KVConfigManager.
	if got := s2.Namespaces(); len(got) != 2 {
		t.Fatalf("namespaces = %v; an emptied namespace must stay", got)
	}
	if m, err := s2.List("other"); err != nil || len(m) != 0 {
		t.Fatalf("list of the emptied namespace: %v, %v", m, err)
	}
	if _, err := s2.List("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("list of an unknown namespace: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode = %v, %v", fi.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestPersistFailureChangesNothing(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put("ns", "k", "v1"); err != nil {
		t.Fatal(err)
	}
	// Replace the file's path with a directory so the rename fails.
	path := filepath.Join(dir, FileName)
	os.Remove(path)
	os.Mkdir(path, 0o700)
	os.WriteFile(filepath.Join(path, "x"), nil, 0o600)
	if err := s.Put("ns", "k", "v2"); err == nil {
		t.Fatal("Put succeeded although the file cannot be written")
	}
	if v, _ := s.Get("ns", "k"); v != "v1" {
		t.Fatalf("value after failed persist = %q, want v1", v)
	}
}

func TestOpenCorrupt(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, FileName), []byte("{not json"), 0o600)
	if _, err := Open(dir); err == nil {
		t.Fatal("a corrupt KV file was accepted")
	}
}
