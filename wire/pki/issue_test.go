package pki

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestInitCAAndOpenLocal(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if _, err := OpenLocal(data); !errors.Is(err, ErrNoLocalCA) {
		t.Fatalf("OpenLocal of an empty directory: %v, want ErrNoLocalCA", err)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("OpenLocal created %s", data)
	}
	l, err := InitCA(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := InitCA(data); !errors.Is(err, ErrCAExists) {
		t.Fatalf("second InitCA: %v, want ErrCAExists", err)
	}
	if _, _, err := LocalOperator(data); err != nil {
		t.Fatalf("InitCA wrote no operator credential: %v", err)
	}
	again, err := OpenLocal(data)
	if err != nil || !again.CA.Equal(l.CA) {
		t.Fatalf("OpenLocal after InitCA: %v", err)
	}
}

func TestWriteCredentialRefusesToReplace(t *testing.T) {
	l := ensureLocal(t, t.TempDir())
	out := t.TempDir()
	r := Request{Role: RoleNode, Name: "n1", Hosts: []string{"n1.example", "10.1.2.3"}, Validity: time.Hour}
	if err := l.WriteCredential(r, out, false); err != nil {
		t.Fatal(err)
	}
	c, err := readCertFile(filepath.Join(out, "n1.crt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"n1", "n1.example", "10.1.2.3", "localhost"} {
		if err := c.VerifyHostname(h); err != nil {
			t.Errorf("node certificate does not cover %s: %v", h, err)
		}
	}
	key, _ := os.ReadFile(filepath.Join(out, "n1.key"))
	if err := l.WriteCredential(r, out, false); !errors.Is(err, ErrCredentialExists) {
		t.Fatalf("second WriteCredential: %v, want ErrCredentialExists", err)
	}
	if now, _ := os.ReadFile(filepath.Join(out, "n1.key")); !bytes.Equal(now, key) {
		t.Fatal("a refused WriteCredential changed the key")
	}
	// Another credential into a directory holding another CA's ca.crt.
	foreign := ensureLocal(t, t.TempDir())
	if err := foreign.WriteCredential(Request{Role: RoleClient, Name: "c1", Validity: time.Hour}, out, false); !errors.Is(err, ErrCredentialExists) {
		t.Fatalf("WriteCredential over another CA's ca.crt: %v, want ErrCredentialExists", err)
	}
	if err := l.WriteCredential(Request{Role: RoleClient, Name: "c2", Hosts: []string{"x"}, Validity: time.Hour}, out, false); err == nil {
		t.Fatal("extra names on a client credential were accepted")
	}
	if err := l.WriteCredential(r, out, true); err != nil {
		t.Fatalf("WriteCredential with force: %v", err)
	}
}

func TestCopyCredential(t *testing.T) {
	l := ensureLocal(t, t.TempDir())
	all := t.TempDir()
	for _, n := range []string{"n0", "n1"} {
		if err := l.WriteCredential(Request{Role: RoleNode, Name: n, Validity: time.Hour}, all, false); err != nil {
			t.Fatal(err)
		}
	}
	own := t.TempDir()
	if err := CopyCredential("n1", all, own); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(own)
	if len(entries) != 3 {
		t.Errorf("copied %d files, want n1.crt, n1.key, ca.crt", len(entries))
	}
	for _, bad := range []string{"", "../n1", "nope"} {
		if err := CopyCredential(bad, all, t.TempDir()); err == nil {
			t.Errorf("CopyCredential(%q) succeeded", bad)
		}
	}
	// A certificate of another CA beside this CA's ca.crt is refused.
	foreign := ensureLocal(t, t.TempDir())
	fdir := t.TempDir()
	foreign.WriteCredential(Request{Role: RoleNode, Name: "n9", Validity: time.Hour}, fdir, false)
	for _, f := range []string{"n9.crt", "n9.key"} {
		b, _ := os.ReadFile(filepath.Join(fdir, f))
		os.WriteFile(filepath.Join(all, f), b, 0o600)
	}
	if err := CopyCredential("n9", all, t.TempDir()); err == nil {
		t.Error("a credential of another CA was copied")
	}
}
