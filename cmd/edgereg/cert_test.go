package main

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCertIssueNeverCreatesCA: issuing from a data directory without a CA
// used to create a new CA there silently, so the credential was signed by a
// CA nobody else trusted.
func TestCertIssueNeverCreatesCA(t *testing.T) {
	data := filepath.Join(t.TempDir(), "new", "dir")
	out := t.TempDir()
	_, stderr, code := run(t, nil, "--data", data, "cert", "issue", "--role", "client", "--name", "app", "--out", out)
	if code == 0 || !strings.Contains(stderr, "no local CA") || !strings.Contains(stderr, "cert init") {
		t.Fatalf("cert issue without a CA: exit %d, stderr %q; want a refusal naming `cert init`", code, stderr)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("cert issue created %s: %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(out, "app.crt")); !os.IsNotExist(err) {
		t.Errorf("cert issue wrote a credential: %v", err)
	}
}

func TestCertInitIssueCopy(t *testing.T) {
	data := filepath.Join(t.TempDir(), "ca")
	if _, stderr, code := run(t, nil, "--data", data, "cert", "init"); code != 0 {
		t.Fatalf("cert init: exit %d: %s", code, stderr)
	}
	// A second init would replace the CA every credential chains to.
	if _, stderr, code := run(t, nil, "--data", data, "cert", "init"); code == 0 || !strings.Contains(stderr, "already") {
		t.Fatalf("second cert init: exit %d, stderr %q; want a refusal", code, stderr)
	}
	nodes := t.TempDir()
	args := []string{"--data", data, "cert", "issue", "--role", "node", "--name", "edgereg-0", "--out", nodes,
		"--dns", "edgereg-0.edgereg-peers.default.svc", "--dns", "edgereg.default.svc", "--ip", "10.0.0.7"}
	if _, stderr, code := run(t, nil, args...); code != 0 {
		t.Fatalf("cert issue: exit %d: %s", code, stderr)
	}
	c := readCert(t, filepath.Join(nodes, "edgereg-0.crt"))
	for _, want := range []string{"edgereg-0", "edgereg-0.edgereg-peers.default.svc", "edgereg.default.svc", "localhost"} {
		if !slices.Contains(c.DNSNames, want) {
			t.Errorf("node certificate names %v, want %s", c.DNSNames, want)
		}
	}
	if !slices.ContainsFunc(c.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("10.0.0.7")) }) {
		t.Errorf("node certificate IPs %v, want 10.0.0.7", c.IPAddresses)
	}

	// Issuing again over an existing credential is refused, and the old
	// files stay as they were.
	before, _ := os.ReadFile(filepath.Join(nodes, "edgereg-0.key"))
	if _, stderr, code := run(t, nil, args...); code == 0 || !strings.Contains(stderr, "--force") {
		t.Fatalf("re-issue without --force: exit %d, stderr %q; want a refusal naming --force", code, stderr)
	}
	after, _ := os.ReadFile(filepath.Join(nodes, "edgereg-0.key"))
	if string(before) != string(after) {
		t.Fatal("a refused re-issue changed the key")
	}
	if _, stderr, code := run(t, nil, append(args, "--force")...); code != 0 {
		t.Fatalf("re-issue with --force: exit %d: %s", code, stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(nodes, "edgereg-0.key")); string(before) == string(after) {
		t.Fatal("--force did not replace the key")
	}
	// Extra names are for node certificates only.
	if _, stderr, code := run(t, nil, "--data", data, "cert", "issue", "--role", "client", "--name", "app", "--out", nodes, "--dns", "x"); code != 2 {
		t.Errorf("--dns on a client credential: exit %d, %s; want a usage error", code, stderr)
	}

	// cert copy picks one node's pair, as the Kubernetes init container does.
	if _, stderr, code := run(t, nil, "--data", data, "cert", "issue", "--role", "node", "--name", "edgereg-1", "--out", nodes); code != 0 {
		t.Fatalf("cert issue edgereg-1: %s", stderr)
	}
	own := t.TempDir()
	if _, stderr, code := run(t, nil, "cert", "copy", "--name", "edgereg-1", "--from", nodes, "--out", own); code != 0 {
		t.Fatalf("cert copy: exit %d: %s", code, stderr)
	}
	entries, _ := os.ReadDir(own)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"ca.crt", "edgereg-1.crt", "edgereg-1.key"}) {
		t.Errorf("cert copy wrote %v, want only edgereg-1's pair and ca.crt", names)
	}
	if fi, err := os.Stat(filepath.Join(own, "edgereg-1.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("copied key: %v, %v; want mode 600", fi, err)
	}
	// A pair that does not match is refused.
	os.WriteFile(filepath.Join(nodes, "edgereg-2.crt"), mustRead(t, filepath.Join(nodes, "edgereg-0.crt")), 0o644)
	os.WriteFile(filepath.Join(nodes, "edgereg-2.key"), mustRead(t, filepath.Join(nodes, "edgereg-1.key")), 0o600)
	if _, stderr, code := run(t, nil, "cert", "copy", "--name", "edgereg-2", "--from", nodes, "--out", t.TempDir()); code == 0 {
		t.Errorf("cert copy of a mismatched pair succeeded: %s", stderr)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCertCommandsSayWhatTheyWrote: each cert command prints one line
// naming every file it wrote, and only files that exist. cert init used to
// leave out the operator credential it also writes (the one the CLI then
// uses), and printed "created CA  :" and "copied  NAME:" with the blanks of
// empty fields.
func TestCertCommandsSayWhatTheyWrote(t *testing.T) {
	data := filepath.Join(t.TempDir(), "ca")
	out, copied := t.TempDir(), t.TempDir()
	for _, c := range []struct {
		args []string
		want []string // files the line must name
	}{
		{[]string{"cert", "init"}, []string{"ca.crt", "ca.key", "operator.crt", "operator.key"}},
		{[]string{"cert", "issue", "--role", "client", "--name", "app", "--out", out}, []string{"app.crt", "app.key", "ca.crt"}},
		{[]string{"cert", "copy", "--name", "app", "--from", out, "--out", copied}, []string{"app.crt", "app.key", "ca.crt"}},
	} {
		stdout, stderr, code := run(t, nil, append([]string{"--data", data}, c.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, stderr)
		}
		line := strings.TrimSpace(stdout)
		if strings.Contains(line, "  ") || strings.Contains(line, " :") || strings.Count(line, "\n") != 0 {
			t.Errorf("%v prints %q: blanks of empty fields, or more than a line", c.args, stdout)
		}
		_, list, ok := strings.Cut(line, ": ")
		if !ok {
			t.Errorf("%v prints %q, no file list", c.args, stdout)
			continue
		}
		var names []string
		for _, f := range strings.Split(list, ", ") {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("%v names %s: %v", c.args, f, err)
			}
			names = append(names, filepath.Base(f))
		}
		for _, w := range c.want {
			if !slices.Contains(names, w) {
				t.Errorf("%v prints %q, which does not name %s", c.args, stdout, w)
			}
		}
	}
}
