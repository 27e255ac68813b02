package pki

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEnsureLocalRenewsExpiringOperator: the operator certificate was
// re-issued only once it had expired, so for a node that kept running the
// CLI on its host failed from that moment until something called
// EnsureLocal again. It is renewed within RenewBefore of expiry, as the
// node's is.
func TestEnsureLocalRenewsExpiringOperator(t *testing.T) {
	dataDir := t.TempDir()
	l := ensureLocal(t, dataDir)
	now := time.Now()
	certPEM, keyPEM, err := l.issue(RoleOperator, localOperatorName, nil, nil, now.Add(-time.Hour), now.Add(10*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dir := TLSDir(dataDir)
	if err := writePair(filepath.Join(dir, "operator.crt"), filepath.Join(dir, "operator.key"), certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	ensureLocal(t, dataDir)
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "operator.crt"), filepath.Join(dir, "operator.key"))
	if err != nil {
		t.Fatal(err)
	}
	if time.Until(pair.Leaf.NotAfter) < 300*24*time.Hour {
		t.Errorf("operator certificate expiring %s was not renewed", pair.Leaf.NotAfter)
	}
}

// TestEnsureLocalSaysWhatItIssued: a damaged node key was replaced with no
// word, and so was a certificate about to expire; Issued names each
// certificate issued anew and why, a damaged file as Damaged, so the node
// can log it.
func TestEnsureLocalSaysWhatItIssued(t *testing.T) {
	dataDir := t.TempDir()
	first := ensureLocal(t, dataDir)
	if len(first.Issued) != 2 || first.Issued[0] != (Issued{File: "node.crt", Reason: "missing"}) ||
		first.Issued[1] != (Issued{File: "operator.crt", Reason: "missing"}) {
		t.Errorf("first start issued %+v, want node.crt and operator.crt, both missing", first.Issued)
	}
	if again := ensureLocal(t, dataDir); len(again.Issued) != 0 {
		t.Errorf("a start with valid credentials issued %+v", again.Issued)
	}
	dir := TLSDir(dataDir)
	if err := os.WriteFile(filepath.Join(dir, "node.key"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	damaged := ensureLocal(t, dataDir)
	if len(damaged.Issued) != 1 || damaged.Issued[0].File != "node.crt" || !damaged.Issued[0].Damaged ||
		!strings.HasPrefix(damaged.Issued[0].Reason, "cannot be loaded: ") {
		t.Errorf("a damaged node.key: issued %+v, want node.crt, damaged, saying it cannot be loaded", damaged.Issued)
	}
	now := time.Now()
	certPEM, keyPEM, err := first.issue(RoleNode, nodeName, nil, defaultHosts, now.Add(-time.Hour), now.Add(10*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := writePair(filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key"), certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	expiring := ensureLocal(t, dataDir)
	want := "expires " + now.Add(10*24*time.Hour).UTC().Format(time.DateOnly) + ", within 30 days"
	if len(expiring.Issued) != 1 || expiring.Issued[0] != (Issued{File: "node.crt", Reason: want}) {
		t.Errorf("a node certificate 10 days from expiry: issued %+v, want node.crt, %q", expiring.Issued, want)
	}
	if d := expiring.OperatorExpiry.Sub(first.OperatorExpiry); d != 0 || time.Until(expiring.OperatorExpiry) < 300*24*time.Hour {
		t.Errorf("OperatorExpiry %s, first %s: want the operator certificate's, unchanged", expiring.OperatorExpiry, first.OperatorExpiry)
	}
	if old, _ := os.ReadFile(filepath.Join(dir, "node.crt")); bytes.Equal(old, certPEM) {
		t.Error("node.crt still holds the expiring certificate")
	}
}
