package pki

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestHalfWrittenBundleIsNotLoaded: a CA bundle or a CRL file written in
// place is read, at times, half written. A PEM block cut short used to be
// skipped as trailing text: the node then trusted only the CAs before the
// cut (and its trust loop closed every connection of the others, as if
// their CA had been taken out), or applied only the CRLs before it. Now
// such a file is refused, the credentials in use stay, and the next look
// takes the whole file.
func TestHalfWrittenBundleIsNotLoaded(t *testing.T) {
	ca1 := newExtCert(t, nil, extCATemplate("ca-1"))
	ca2 := newExtCert(t, nil, extCATemplate("ca-2"))
	node := newExtCert(t, ca1, &x509.Certificate{DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	dir := t.TempDir()
	keyDER, _ := x509.MarshalPKCS8PrivateKey(node.key)
	certFile, keyFile, caFile := filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key"), filepath.Join(dir, "ca.crt")
	rlFile := filepath.Join(dir, "revoked.crl")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: node.cert.Raw}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	bundle := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca1.cert.Raw}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca2.cert.Raw})...)
	os.WriteFile(caFile, bundle, 0o600)
	ofCA2 := extClient(t, ca2, "of-ca-2", nil)
	crls := append(ca1.crl(t, time.Now().Add(time.Hour)), ca2.crl(t, time.Now().Add(time.Hour), ofCA2.cert.SerialNumber)...)
	os.WriteFile(rlFile, crls, 0o600)
	var mu sync.Mutex
	var failed []error
	r, err := NewReloader(ServerCredentials{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, RevocationFile: rlFile,
		OnReload: func(err error) {
			if err != nil {
				mu.Lock()
				failed = append(failed, err)
				mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Now()}
	r.now = clock.now
	chain := []*x509.Certificate{ofCA2.cert}
	if err := r.Recheck(chain, time.Now()); !errors.Is(err, ErrRevoked) {
		t.Fatalf("of CA 2, on CA 2's CRL: %v, want ErrRevoked", err)
	}
	os.WriteFile(rlFile, crls[:len(crls)-40], 0o600) // CA 2's CRL cut short
	clock.step()
	r.Current()
	if err := r.Recheck(chain, time.Now()); !errors.Is(err, ErrRevoked) {
		t.Errorf("with CA 2's CRL half written: %v, want it still revoked", err)
	}
	os.WriteFile(rlFile, ca1.crl(t, time.Now().Add(time.Hour)), 0o600) // nothing of CA 2's revoked
	clock.step()
	r.Current()
	if err := r.Recheck(chain, time.Now()); err != nil {
		t.Fatalf("on no CRL: %v", err)
	}
	os.WriteFile(caFile, bundle[:len(bundle)-40], 0o600) // CA 2 cut short
	clock.step()
	r.Current()
	if err := r.Recheck(chain, time.Now()); err != nil {
		t.Errorf("with CA 2 half written in the bundle: %v, want CA 2 still trusted", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failed) != 2 {
		t.Errorf("reloads refused: %v, want the two half-written files", failed)
	}
}
