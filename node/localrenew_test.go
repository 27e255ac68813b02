package node

import (
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/pki"
)

// TestLocalCertificateRenewedWhileRunning: the local CA re-issued the
// node's certificate only at a start, within 30 days of its expiry, so a
// node that ran for a year served it expired and every handshake failed
// until someone restarted it. A running node renews it once it comes
// within pki.RenewBefore of expiry and serves the new one, without a
// restart. The months are stood in for by writing over node.crt and
// node.key a certificate of the node's CA that expires in a day.
func TestLocalCertificateRenewedWhileRunning(t *testing.T) {
	logs := &syncBuffer{}
	tn := startNode(t, logTo(logs))
	operator, pool, err := pki.LocalOperator(tn.dir)
	if err != nil {
		t.Fatal(err)
	}
	first, err := tn.servedLeaf(&operator, pool)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.OpenLocal(tn.dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteCredential(pki.Request{Role: pki.RoleNode, Name: "node", Validity: 24 * time.Hour}, pki.TLSDir(tn.dir), true); err != nil {
		t.Fatal(err)
	}
	expiring := readLeaf(t, filepath.Join(pki.TLSDir(tn.dir), "node.crt"))
	seen := map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		leaf, err := tn.servedLeaf(&operator, pool)
		if err != nil {
			t.Fatalf("handshake while the certificate was renewed: %v\n%s", err, logs)
		}
		seen[serialName(leaf.SerialNumber, first, expiring)] = true
		if leaf.SerialNumber.Cmp(first.SerialNumber) != 0 && leaf.SerialNumber.Cmp(expiring.SerialNumber) != 0 {
			if left := time.Until(leaf.NotAfter); left < 300*24*time.Hour {
				t.Fatalf("the renewed certificate has %s left, want about a year", left)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s the node still served %v: never a renewed certificate\n%s", seen, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if onDisk := readLeaf(t, filepath.Join(pki.TLSDir(tn.dir), "node.crt")); time.Until(onDisk.NotAfter) < 300*24*time.Hour {
		t.Errorf("node.crt on disk expires %s: the renewal was not written", onDisk.NotAfter)
	}
	if !strings.Contains(logs.String(), "local CA issued a certificate") || !strings.Contains(logs.String(), "within 30 days") {
		t.Errorf("the renewal was not logged with its reason:\n%s", logs)
	}
}

func readLeaf(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(path, strings.TrimSuffix(path, ".crt")+".key")
	if err != nil {
		t.Fatal(err)
	}
	return pair.Leaf
}

func serialName(s *big.Int, first, expiring *x509.Certificate) string {
	switch {
	case s.Cmp(first.SerialNumber) == 0:
		return "the first certificate"
	case s.Cmp(expiring.SerialNumber) == 0:
		return "the expiring one"
	}
	return "a new one"
}

// TestDamagedLocalKeyIsReplacedAloud: a damaged tls/node.key was replaced
// by a new key and certificate with no word in the log, so a disk fault in
// the data directory went unnoticed. The node still starts (the local CA
// can issue another), and says what it replaced and why, as a warning.
func TestDamagedLocalKeyIsReplacedAloud(t *testing.T) {
	dir := t.TempDir()
	if _, err := pki.EnsureLocal(dir, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pki.TLSDir(dir), "node.key"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	startNodeIn(t, dir, "127.0.0.1:0", logTo(logs))
	if !strings.Contains(logs.String(), `level=WARN msg="local CA issued a certificate in place of a damaged one"`) ||
		!strings.Contains(logs.String(), "node.crt") || !strings.Contains(logs.String(), "cannot be loaded") {
		t.Errorf("a damaged node.key was replaced without a warning naming it:\n%s", logs)
	}
}

// TestForeignCertificateOverLocalOneIsReplaced: since the node serves the
// local CA's files through its Reloader (so that it serves what renewal
// writes), a pair written over node.crt and node.key that its CA did not
// sign, or that does not cover the node's hosts, was served as it was, and
// every client's handshake failed. A start re-issues such a pair; so does
// the running node as soon as the files change, and the node's clients go
// on connecting.
func TestForeignCertificateOverLocalOneIsReplaced(t *testing.T) {
	logs := &syncBuffer{}
	tn := startNode(t, logTo(logs))
	operator, pool, err := pki.LocalOperator(tn.dir)
	if err != nil {
		t.Fatal(err)
	}
	ping := func() error {
		_, err := tn.servedLeaf(&operator, pool)
		return err
	}
	if err := ping(); err != nil {
		t.Fatal(err)
	}
	other, err := pki.EnsureLocal(t.TempDir(), nil) // another CA
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := other.WriteCredential(pki.Request{Role: pki.RoleNode, Name: "node", Validity: 365 * 24 * time.Hour}, dir, true); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"node.key", "node.crt"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pki.TLSDir(tn.dir), f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The Reloader takes files a second after they last changed; by the
	// time it has, and a second more, the node must have replaced them.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), `reason="not valid under this CA`) {
		if time.Now().After(deadline) {
			t.Fatalf("the node never re-issued the foreign pair written over its own:\n%s", logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := 0; ; i++ {
		err := ping()
		if err == nil {
			break
		}
		if i == 100 {
			t.Fatalf("clients still fail after the foreign pair was replaced: %v\n%s", err, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if leaf := readLeaf(t, filepath.Join(pki.TLSDir(tn.dir), "node.crt")); leaf.CheckSignatureFrom(tn.local.CA) != nil {
		t.Error("node.crt on disk is not signed by the node's CA")
	}
}

// TestLocalKeyDamagedWhileRunningIsReplaced: a node.key damaged under a
// running node (the Reloader cannot take it, and keeps the pair it
// serves) is re-issued at once, with a warning, rather than left for the
// next start to find.
func TestLocalKeyDamagedWhileRunningIsReplaced(t *testing.T) {
	logs := &syncBuffer{}
	tn := startNode(t, logTo(logs))
	key := filepath.Join(pki.TLSDir(tn.dir), "node.key")
	if err := os.WriteFile(key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), `level=WARN msg="local CA issued a certificate in place of a damaged one"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the damaged node.key was never re-issued:\n%s", logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	readLeaf(t, filepath.Join(pki.TLSDir(tn.dir), "node.crt")) // loads with its key
}
