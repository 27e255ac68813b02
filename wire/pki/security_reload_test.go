package pki

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestBundleCutAtABlockBoundaryIsNotTaken: a CA bundle rewritten in place
// (`cat ca-1.pem ca-2.pem > ca.crt` writes each file in turn) can be read
// between two writes, cut exactly after a PEM block: a whole, valid bundle
// of fewer CAs. Taken, it made the node close every connection of the CAs
// after the cut as untrusted, a second before the rest of the file
// arrived. A file changed less than a look ago is now read at the next
// look (a writer still at it changes it again meanwhile), so the cut is
// never taken; a bundle that stays so is taken one look later.
func TestBundleCutAtABlockBoundaryIsNotTaken(t *testing.T) {
	ca1 := newExtCert(t, nil, extCATemplate("ca-1"))
	ca2 := newExtCert(t, nil, extCATemplate("ca-2"))
	node := newExtCert(t, ca1, &x509.Certificate{DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	dir := t.TempDir()
	keyDER, _ := x509.MarshalPKCS8PrivateKey(node.key)
	certFile, keyFile, caFile := filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key"), filepath.Join(dir, "ca.crt")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: node.cert.Raw}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	first := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca1.cert.Raw})
	bundle := append(append([]byte(nil), first...), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca2.cert.Raw})...)
	os.WriteFile(caFile, bundle, 0o600)
	r, err := NewReloader(ServerCredentials{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Now()}
	r.now = clock.now
	// lookSoonAfterWrite makes r look at its files a moment after caFile
	// was written, as the node's loop does every second.
	lookSoonAfterWrite := func() {
		fi, err := os.Stat(caFile)
		if err != nil {
			t.Fatal(err)
		}
		clock.mu.Lock()
		clock.t = fi.ModTime().Add(DefaultCheckEvery / 10)
		clock.mu.Unlock()
		r.mu.Lock()
		r.nextCheck = time.Time{}
		r.mu.Unlock()
		r.Current()
	}
	chain := []*x509.Certificate{extClient(t, ca2, "of-ca-2", nil).cert}

	os.WriteFile(caFile, first, 0o600) // the writer between its two writes
	lookSoonAfterWrite()
	if err := r.Recheck(chain, time.Now()); err != nil {
		t.Fatalf("a look between the two writes of the bundle: %v; want CA 2 still trusted", err)
	}
	os.WriteFile(caFile, bundle, 0o600) // the writer done
	lookSoonAfterWrite()
	clock.step()
	r.Current()
	if err := r.Recheck(chain, time.Now()); err != nil {
		t.Fatalf("with the whole bundle back: %v", err)
	}

	// Cut for good (CA 2 taken out by one write): taken at the next look.
	os.WriteFile(caFile, first, 0o600)
	lookSoonAfterWrite()
	gen := r.Generation()
	clock.step()
	r.Current()
	if r.Generation() == gen {
		t.Fatal("a bundle that stayed as written for a look was not taken")
	}
	if err := r.Recheck(chain, time.Now()); err == nil {
		t.Fatal("CA 2 taken out of the bundle: its certificate still trusted")
	}
}

// TestCRLTruncatedForRewriteStillRevokes: `openssl ca -gencrl -out
// crl.pem` truncates the file, then writes it. A look in between found an
// empty file, a valid empty list, and let every revoked certificate in
// until the next look. It is now read once the writer is done.
func TestCRLTruncatedForRewriteStillRevokes(t *testing.T) {
	ca := newExtCert(t, nil, extCATemplate("ca"))
	revoked := extClient(t, ca, "revoked", nil)
	r, rlFile, _ := extReloader(t, ca, ca.cert)
	crl := ca.crl(t, time.Now().Add(time.Hour), revoked.cert.SerialNumber)
	os.WriteFile(rlFile, crl, 0o600)
	reload(t, r) // steps r's clock an hour: the file is old by then
	chain := []*x509.Certificate{revoked.cert}
	if err := r.Recheck(chain, time.Now()); err == nil {
		t.Fatal("not revoked by the CRL")
	}
	os.WriteFile(rlFile, nil, 0o600) // truncated, not yet written
	fi, err := os.Stat(rlFile)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: fi.ModTime().Add(DefaultCheckEvery / 10)}
	r.now = clock.now
	r.mu.Lock()
	r.nextCheck = time.Time{}
	r.mu.Unlock()
	r.Current()
	if err := r.Recheck(chain, time.Now()); err == nil {
		t.Fatal("a look at the CRL file between its truncation and its writing let the revoked certificate in")
	}
}

// TestValidUntilCountsOnlyTrustedCleanChains: a peer with a cross-signed
// intermediate stays valid until the last of its chains expires, but only
// chains that verify now count: one to a CA taken out of the bundle, or
// through a revoked certificate, gives no time.
func TestValidUntilCountsOnlyTrustedCleanChains(t *testing.T) {
	soonTmpl, lastingTmpl := extCATemplate("root-expiring"), extCATemplate("root-lasting")
	soonTmpl.NotBefore, soonTmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Minute)
	lastingTmpl.NotBefore, lastingTmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	soon, lasting := newExtCert(t, nil, soonTmpl), newExtCert(t, nil, lastingTmpl)
	interTmpl := extCATemplate("intermediate")
	interTmpl.NotBefore, interTmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(12*time.Hour)
	bySoon := newExtCert(t, soon, interTmpl)
	cross := extCATemplate("intermediate")
	cross.NotBefore, cross.NotAfter, cross.SerialNumber = interTmpl.NotBefore, interTmpl.NotAfter, big.NewInt(4242)
	der, err := x509.CreateCertificate(rand.Reader, cross, lasting.cert, &bySoon.key.PublicKey, lasting.key)
	if err != nil {
		t.Fatal(err)
	}
	byLasting, _ := x509.ParseCertificate(der)
	leaf := extClient(t, bySoon, "reader", nil)
	certs := []*x509.Certificate{leaf.cert, bySoon.cert, byLasting}
	soonEnd := soon.cert.NotAfter

	both, rlFile, _ := extReloader(t, soon, soon.cert, lasting.cert)
	if until, err := both.ValidUntil(certs, time.Now()); err != nil || !until.Equal(leaf.cert.NotAfter) {
		t.Errorf("both roots trusted: valid until %v, %v; want the leaf's %v", until, err, leaf.cert.NotAfter)
	}
	os.WriteFile(rlFile, lasting.crl(t, time.Now().Add(time.Hour), byLasting.SerialNumber), 0o600)
	reload(t, both)
	if until, err := both.ValidUntil(certs, time.Now()); err != nil || !until.Equal(soonEnd) {
		t.Errorf("the cross-signature revoked: valid until %v, %v; want the expiring root's %v", until, err, soonEnd)
	}
	one, _, _ := extReloader(t, soon, soon.cert)
	if until, err := one.ValidUntil(certs, time.Now()); err != nil || !until.Equal(soonEnd) {
		t.Errorf("only the expiring root trusted: valid until %v, %v; want %v", until, err, soonEnd)
	}
	// A resumed session's chains, verified when both roots were trusted.
	opts := x509.VerifyOptions{Roots: x509.NewCertPool(), Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	opts.Roots.AddCert(soon.cert)
	opts.Roots.AddCert(lasting.cert)
	opts.Intermediates.AddCert(bySoon.cert)
	opts.Intermediates.AddCert(byLasting)
	chains, err := leaf.cert.Verify(opts)
	if err != nil || len(chains) != 2 {
		t.Fatalf("%d chains, %v", len(chains), err)
	}
	if got := LastExpiry(one.Rooted(chains)); !got.Equal(soonEnd) {
		t.Errorf("chains rooted in the bundle in use expire %v, want %v", got, soonEnd)
	}
}
