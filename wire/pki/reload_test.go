package pki

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock lets a test step past the Reloader's CheckEvery.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) step()          { c.mu.Lock(); c.t = c.t.Add(time.Hour); c.mu.Unlock() }

func writeCredential(t *testing.T, l *Local, name, dir string) {
	t.Helper()
	if err := l.WriteCredential(Request{Role: RoleNode, Name: name, Validity: time.Hour}, dir, true); err != nil {
		t.Fatal(err)
	}
}

func tlsPair(t *testing.T, l *Local, name string) *tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := l.Issue(RoleClient, name, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestReloaderCertificateAndRevocations: a node's certificate, key and
// revocation list are re-read when they change, with no restart; a change
// that cannot be used leaves the last good credentials in place.
func TestReloaderCertificateAndRevocations(t *testing.T) {
	l := ensureLocal(t, t.TempDir())
	dir := t.TempDir()
	writeCredential(t, l, "node", dir)
	rlFile := filepath.Join(dir, "revoked.txt")
	os.WriteFile(rlFile, []byte("# nobody yet\n"), 0o600)
	var reloads []error
	var mu sync.Mutex
	clock := &fakeClock{t: time.Now()}
	creds := ServerCredentials{CertFile: filepath.Join(dir, "node.crt"), KeyFile: filepath.Join(dir, "node.key"),
		ClientCAFile: filepath.Join(dir, "ca.crt"), RevocationFile: rlFile,
		OnReload: func(err error) { mu.Lock(); reloads = append(reloads, err); mu.Unlock() }}
	r, err := NewReloader(creds)
	if err != nil {
		t.Fatal(err)
	}
	r.now = clock.now
	srv := r.TLSConfig()
	alice := tlsPair(t, l, "alice")
	bob := tlsPair(t, l, "bob")
	serverSerial := func(client *tls.Certificate) (*big.Int, error) {
		t.Helper()
		_, cs, srvErr, cliErr := handshake(t, srv, ClientConfig(client, l.CAPool, ""))
		if srvErr != nil {
			return nil, srvErr
		}
		if cliErr != nil {
			return nil, cliErr
		}
		return cs.PeerCertificates[0].SerialNumber, nil
	}
	first, err := serverSerial(alice)
	if err != nil {
		t.Fatal(err)
	}

	// A new certificate, written in place: served after the next look.
	writeCredential(t, l, "node", dir)
	if s, _ := serverSerial(alice); s.Cmp(first) != 0 {
		t.Fatal("the files were looked at before CheckEvery passed")
	}
	clock.step()
	second, err := serverSerial(alice)
	if err != nil || second.Cmp(first) == 0 {
		t.Fatalf("after the certificate changed the node still serves serial %x (%v)", second, err)
	}

	// Revoking bob by the serial list refuses him at once (next look).
	os.WriteFile(rlFile, []byte(bob.Leaf.SerialNumber.Text(16)+"\n"), 0o600)
	clock.step()
	if _, err := serverSerial(bob); !errors.Is(err, ErrRevoked) {
		t.Fatalf("revoked bob: %v, want ErrRevoked", err)
	}
	if _, err := serverSerial(alice); err != nil {
		t.Fatalf("alice after bob's revocation: %v", err)
	}

	// A standard X.509 CRL of the CA revoking alice replaces the list.
	os.WriteFile(rlFile, crlPEM(t, l, alice.Leaf.SerialNumber), 0o600)
	clock.step()
	if _, err := serverSerial(alice); !errors.Is(err, ErrRevoked) {
		t.Fatalf("alice revoked by a CRL: %v, want ErrRevoked", err)
	}
	if _, err := serverSerial(bob); err != nil {
		t.Fatalf("bob, no longer on the list: %v", err)
	}

	// Broken changes keep the last good credentials: a half-written
	// certificate, a CRL of another CA.
	os.WriteFile(filepath.Join(dir, "node.crt"), []byte("-----BEGIN CERTIFICATE-----\ngarbage"), 0o644)
	clock.step()
	if s, err := serverSerial(bob); err != nil || s.Cmp(second) != 0 {
		t.Fatalf("after a broken certificate file: serial %x, %v; want the last good %x", s, err, second)
	}
	writeCredential(t, l, "node", dir)
	foreign := ensureLocal(t, t.TempDir())
	os.WriteFile(rlFile, crlPEM(t, foreign, bob.Leaf.SerialNumber), 0o600)
	clock.step()
	if _, err := serverSerial(bob); err != nil {
		t.Fatalf("a foreign CA's CRL was applied: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	var failed []string
	for _, e := range reloads {
		if e != nil {
			failed = append(failed, e.Error())
		}
	}
	if len(failed) != 2 || !strings.Contains(failed[1], "not signed by the client CA") {
		t.Errorf("reload errors reported: %q; want the broken certificate and the foreign CRL", failed)
	}
}

// crlPEM is a CRL signed by l's CA revoking serials.
func crlPEM(t *testing.T, l *Local, serials ...*big.Int) []byte {
	t.Helper()
	var entries []x509.RevocationListEntry
	for _, s := range serials {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: time.Now()})
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: big.NewInt(1), ThisUpdate: time.Now(), NextUpdate: time.Now().Add(time.Hour),
		RevokedCertificateEntries: entries,
	}, l.CA, l.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})
}

func TestLoadRevocationsCRL(t *testing.T) {
	l := ensureLocal(t, t.TempDir())
	serial := big.NewInt(0xabcdef)
	dir := t.TempDir()
	p := filepath.Join(dir, "ca.crl")
	os.WriteFile(p, crlPEM(t, l, serial), 0o600)
	block, _ := pem.Decode(crlPEM(t, l, serial))
	d := filepath.Join(dir, "ca.crl.der")
	os.WriteFile(d, block.Bytes, 0o600)
	for _, path := range []string{p, d} {
		rl, err := LoadRevocationsFrom(path, []*x509.Certificate{l.CA})
		if err != nil || !rl.Revoked(serial) || rl.Revoked(big.NewInt(1)) {
			t.Errorf("%s: %v, revoked %v", path, err, rl.Revoked(serial))
		}
	}
	os.WriteFile(p, []byte("-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n"), 0o600)
	if _, err := LoadRevocations(p); err == nil {
		t.Error("a corrupt CRL was accepted")
	}
}

// TestReloaderRefusesACertificateThatCannotServe: a node started with a
// client's credential as --tls-cert (an operator's, copied by mistake)
// came up and logged "node started", and every client then failed its
// handshake ("certificate is not valid for any names"), so the mistake
// showed on the clients, not at the node. A certificate whose extended key
// usage leaves out serverAuth is refused when loaded, naming the file and
// what to give instead.
func TestReloaderRefusesACertificateThatCannotServe(t *testing.T) {
	l := ensureLocal(t, t.TempDir())
	dir := t.TempDir()
	if err := l.WriteCredential(Request{Role: RoleOperator, Name: "alice", Validity: time.Hour}, dir, false); err != nil {
		t.Fatal(err)
	}
	certFile := filepath.Join(dir, "alice.crt")
	_, err := NewReloader(ServerCredentials{CertFile: certFile, KeyFile: filepath.Join(dir, "alice.key"),
		ClientCAFile: filepath.Join(dir, "ca.crt")})
	if err == nil || !strings.Contains(err.Error(), certFile) || !strings.Contains(err.Error(), "--role node") {
		t.Fatalf("NewReloader with an operator certificate: %v, want a refusal naming %s and --role node", err, certFile)
	}
	writeCredential(t, l, "node1", dir)
	if _, err := NewReloader(ServerCredentials{CertFile: filepath.Join(dir, "node1.crt"), KeyFile: filepath.Join(dir, "node1.key"),
		ClientCAFile: filepath.Join(dir, "ca.crt")}); err != nil {
		t.Fatalf("NewReloader with a node certificate: %v", err)
	}
}
