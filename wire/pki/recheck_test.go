package pki

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRecheck: a certificate that passed its handshake is checked again
// against the credentials in use: revoked, its CA no longer trusted, or
// expired, each with its own error; Generation counts only the reloads
// that took effect.
func TestRecheck(t *testing.T) {
	l := ensureLocal(t, t.TempDir())
	other := ensureLocal(t, t.TempDir())
	dir := t.TempDir()
	writeCredential(t, l, "node", dir)
	rlFile := filepath.Join(dir, "revoked.txt")
	os.WriteFile(rlFile, nil, 0o600)
	clock := &fakeClock{t: time.Now()}
	r, err := NewReloader(ServerCredentials{CertFile: filepath.Join(dir, "node.crt"), KeyFile: filepath.Join(dir, "node.key"),
		ClientCAFile: filepath.Join(dir, "ca.crt"), RevocationFile: rlFile})
	if err != nil {
		t.Fatal(err)
	}
	r.now = clock.now
	alice, stranger := tlsPair(t, l, "alice"), tlsPair(t, other, "stranger")
	now := time.Now()
	if err := r.Recheck(nil, now); err != nil {
		t.Errorf("an anonymous peer: %v", err)
	}
	if err := r.Recheck([]*x509.Certificate{alice.Leaf}, now); err != nil {
		t.Errorf("a valid certificate: %v", err)
	}
	if err := r.Recheck([]*x509.Certificate{stranger.Leaf}, now); !errors.Is(err, ErrUntrusted) {
		t.Errorf("another CA's certificate: %v, want ErrUntrusted", err)
	}
	if err := r.Recheck([]*x509.Certificate{alice.Leaf}, alice.Leaf.NotAfter.Add(time.Second)); !errors.Is(err, ErrExpired) {
		t.Errorf("past its NotAfter: %v, want ErrExpired", err)
	}
	os.WriteFile(rlFile, []byte("not hex\n"), 0o600) // a reload that fails
	clock.step()
	r.Current()
	if g := r.Generation(); g != 0 {
		t.Errorf("generation %d after a failed reload, want 0", g)
	}
	os.WriteFile(rlFile, []byte(alice.Leaf.SerialNumber.Text(16)+"\n"), 0o600)
	clock.step()
	r.Current()
	if g := r.Generation(); g != 1 {
		t.Errorf("generation %d after a reload, want 1", g)
	}
	if err := r.Recheck([]*x509.Certificate{alice.Leaf}, now); !errors.Is(err, ErrRevoked) {
		t.Errorf("after her revocation: %v, want ErrRevoked", err)
	}
}
