package pki

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/big"
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

// TestResumedSessionCheckedOnChainsStillTrusted: a resumed session brings
// back every chain its first handshake verified. With a cross-signed
// intermediate (one certificate by CA A, one by CA B), taking A out of the
// bundle and revoking the intermediate's certificate of B leaves no
// trusted clean path, and the resumption is refused. Before, the chain
// through A, no longer trusted, still counted as the clean one.
func TestResumedSessionCheckedOnChainsStillTrusted(t *testing.T) {
	a := newExtCert(t, nil, extCATemplate("ca-a"))
	b := newExtCert(t, nil, extCATemplate("ca-b"))
	interA := newExtCert(t, a, extCATemplate("intermediate"))
	// The same intermediate (name and key), signed by B too.
	tmplB := extCATemplate("intermediate")
	der, err := x509.CreateCertificate(rand.Reader, func() *x509.Certificate {
		tmplB.SerialNumber, tmplB.NotBefore, tmplB.NotAfter = big.NewInt(77), time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		tmplB.SubjectKeyId = interA.cert.SubjectKeyId
		return tmplB
	}(), b.cert, &interA.key.PublicKey, b.key)
	if err != nil {
		t.Fatal(err)
	}
	interBCert, _ := x509.ParseCertificate(der)
	interB := &extCA{cert: interBCert, key: interA.key}
	leaf := extClient(t, interA, "cross", nil)

	node := newExtCert(t, a, &x509.Certificate{DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	dir := t.TempDir()
	keyDER, _ := x509.MarshalPKCS8PrivateKey(node.key)
	certFile, keyFile, caFile := filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key"), filepath.Join(dir, "ca.crt")
	rlFile := filepath.Join(dir, "revoked.crl")
	pemOf := func(cs ...*x509.Certificate) []byte {
		var out []byte
		for _, c := range cs {
			out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
		return out
	}
	os.WriteFile(certFile, pemOf(node.cert), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	os.WriteFile(caFile, pemOf(a.cert, b.cert), 0o600)
	os.WriteFile(rlFile, nil, 0o600)
	r, err := NewReloader(ServerCredentials{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, RevocationFile: rlFile})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Now()}
	r.now = clock.now
	roots := x509.NewCertPool()
	roots.AddCert(a.cert)
	cli := ClientConfig(leaf.credential(interA, interB), roots, "")
	srvConf := r.TLSConfig() // one, as a node has: its session tickets
	srv, _, srvErr, cliErr := handshake(t, srvConf, cli)
	if srvErr != nil || cliErr != nil || len(srv.VerifiedChains) != 2 {
		t.Fatalf("first handshake: %d chains, %v, %v; want 2 chains", len(srv.VerifiedChains), srvErr, cliErr)
	}
	if again, _, err1, err2 := handshake(t, srvConf, cli); !again.DidResume || err1 != nil || err2 != nil {
		t.Fatalf("second handshake: resumed %v, %v, %v; want resumed", again.DidResume, err1, err2)
	}
	// A out of the bundle; the node's own certificate is still A's, which
	// does not matter to client verification. B revokes its intermediate.
	os.WriteFile(caFile, pemOf(b.cert), 0o600)
	os.WriteFile(rlFile, b.crl(t, time.Now().Add(time.Hour), interB.cert.SerialNumber), 0o600)
	clock.step()
	gen := r.Generation()
	r.Current()
	if r.Generation() == gen {
		t.Fatal("not reloaded")
	}
	srv, _, srvErr, _ = handshake(t, srvConf, cli)
	if srvErr == nil {
		t.Errorf("resumed (%v) with no trusted path left clean: let in", srv.DidResume)
	}
}
