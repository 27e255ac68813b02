package pki

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLocalOperatorRereadsAPairCaughtMidRenewal: the local CA renews the
// operator's pair while the node runs, key first, then certificate, each
// file replaced whole. The CLI reads the certificate, then the key: one
// that read between the two writes got the old certificate with the new
// key and failed ("private key does not match public key"), once, for
// nothing. A pair that does not match is read again, a few times, before
// that is an error.
func TestLocalOperatorRereadsAPairCaughtMidRenewal(t *testing.T) {
	dataDir := t.TempDir()
	l := ensureLocal(t, dataDir)
	dir := TLSDir(dataDir)
	crt, key := filepath.Join(dir, "operator.crt"), filepath.Join(dir, "operator.key")
	newCert, newKey, err := l.Issue(RoleOperator, localOperatorName, nil, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The renewal's first write: the new key beside the old certificate.
	if err := os.WriteFile(key, newKey, 0o600); err != nil {
		t.Fatal(err)
	}
	mismatches := 0
	testHookPairMismatch = func() {
		mismatches++
		if mismatches == 1 { // its second write, after the CLI's first read
			if err := os.WriteFile(crt, newCert, 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	defer func() { testHookPairMismatch = nil }()
	if _, _, err := LocalOperator(dataDir); err != nil {
		t.Fatalf("the operator's pair read mid-renewal: %v", err)
	}
	if mismatches != 1 {
		t.Errorf("%d mismatched reads, want 1", mismatches)
	}
}

// TestMismatchedPairStaysAnError: a pair that does not match for good is
// still refused, naming both files, after the rereads.
func TestMismatchedPairStaysAnError(t *testing.T) {
	dataDir := t.TempDir()
	l := ensureLocal(t, dataDir)
	_, otherKey, err := l.Issue(RoleOperator, localOperatorName, nil, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(TLSDir(dataDir), "operator.key")
	if err := os.WriteFile(key, otherKey, 0o600); err != nil {
		t.Fatal(err)
	}
	reads := 0
	testHookPairMismatch = func() { reads++ }
	defer func() { testHookPairMismatch = nil }()
	_, _, err = LocalOperator(dataDir)
	if err == nil || reads != pairReads {
		t.Fatalf("a mismatched pair: %v after %d reads, want an error after %d", err, reads, pairReads)
	}
	if !strings.Contains(err.Error(), "operator.crt") || !strings.Contains(err.Error(), "operator.key") {
		t.Errorf("the error does not name both files: %v", err)
	}
}
