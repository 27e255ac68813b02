package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// extCA is a CA of an external PKI (root or intermediate), made here with
// crypto/x509 so a test can choose serials and chains.
type extCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// newExtCert signs tmpl with ca (self-signed when ca is nil) and returns
// it with its new key. A zero serial in tmpl becomes a random one.
func newExtCert(t *testing.T, ca *extCA, tmpl *x509.Certificate) *extCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.SerialNumber == nil {
		tmpl.SerialNumber, _ = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &extCA{cert: c, key: key}
}

func extCATemplate(name string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature}
}

// extClient is a client certificate of role client signed by ca.
func extClient(t *testing.T, ca *extCA, name string, serial *big.Int) *extCA {
	u, _ := url.Parse("edgereg://role/client")
	return newExtCert(t, ca, &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs: []*url.URL{u}})
}

// credential is c's certificate and key, sent with the certificates of with.
func (c *extCA) credential(with ...*extCA) *tls.Certificate {
	tc := &tls.Certificate{Certificate: [][]byte{c.cert.Raw}, PrivateKey: c.key, Leaf: c.cert}
	for _, w := range with {
		tc.Certificate = append(tc.Certificate, w.cert.Raw)
	}
	return tc
}

// crl is a PEM CRL signed by ca revoking serials.
func (ca *extCA) crl(t *testing.T, nextUpdate time.Time, serials ...*big.Int) []byte {
	t.Helper()
	var entries []x509.RevocationListEntry
	for _, s := range serials {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: time.Now()})
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1),
		ThisUpdate: time.Now().Add(-2 * time.Hour), NextUpdate: nextUpdate, RevokedCertificateEntries: entries},
		ca.cert, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})
}

// extReloader is a Reloader serving a node certificate of root, trusting
// clientCAs and reading revocations from the file it returns.
func extReloader(t *testing.T, root *extCA, clientCAs ...*x509.Certificate) (*Reloader, string, *x509.CertPool) {
	t.Helper()
	node := newExtCert(t, root, &x509.Certificate{Subject: pkix.Name{CommonName: "node"}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	rlFile := filepath.Join(t.TempDir(), "revoked.crl")
	os.WriteFile(rlFile, nil, 0o600)
	r, err := NewReloader(ServerCredentials{Cert: *node.credential(), ClientCAs: clientCAs, RevocationFile: rlFile})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(root.cert)
	return r, rlFile, roots
}

// reload makes r read its files now.
func reload(t *testing.T, r *Reloader) {
	t.Helper()
	clock := &fakeClock{t: r.now()}
	clock.step()
	r.now = clock.now
	gen := r.Generation()
	r.Current()
	if r.Generation() == gen {
		t.Fatal("the reloader did not take the new revocation file")
	}
}

// TestRevokedIntermediateRefusesItsCertificates: in a root -> intermediate
// -> client PKI, the root's CRL revoking the intermediate refuses every
// certificate the intermediate issued, at the handshake and when a
// connection is checked again, as a revoked leaf is; certificates the
// root signed itself stay. Before, only the leaf's serial was looked at.
func TestRevokedIntermediateRefusesItsCertificates(t *testing.T) {
	root := newExtCert(t, nil, extCATemplate("root"))
	inter := newExtCert(t, root, extCATemplate("intermediate"))
	r, rlFile, roots := extReloader(t, root, root.cert)
	underInter := extClient(t, inter, "under-intermediate", nil)
	direct := extClient(t, root, "direct", nil)
	dial := func(c *tls.Certificate) error {
		_, _, srvErr, cliErr := handshake(t, r.TLSConfig(), ClientConfig(c, roots, ""))
		return errors.Join(srvErr, cliErr)
	}
	if err := dial(underInter.credential(inter)); err != nil {
		t.Fatalf("before the revocation: %v", err)
	}
	os.WriteFile(rlFile, root.crl(t, time.Now().Add(time.Hour), inter.cert.SerialNumber), 0o600)
	reload(t, r)
	if err := dial(underInter.credential(inter)); !errors.Is(err, ErrRevoked) {
		t.Errorf("a certificate of the revoked intermediate at the handshake: %v, want ErrRevoked", err)
	}
	if err := r.Recheck([]*x509.Certificate{underInter.cert, inter.cert}, time.Now()); !errors.Is(err, ErrRevoked) {
		t.Errorf("a connection of the revoked intermediate checked again: %v, want ErrRevoked", err)
	}
	if err := dial(direct.credential()); err != nil {
		t.Errorf("a certificate the root signed itself: %v", err)
	}
	if err := r.Recheck([]*x509.Certificate{direct.cert}, time.Now()); err != nil {
		t.Errorf("a certificate the root signed itself, checked again: %v", err)
	}
}

// TestCRLRevokesOnlyItsOwnCAsCertificates: serials are unique per issuer
// only, so a CRL of CA A that lists serial 5 revokes A's certificate 5 and
// not B's, though both CAs are trusted. Before, any serial on any CRL was
// revoked whoever issued it.
func TestCRLRevokesOnlyItsOwnCAsCertificates(t *testing.T) {
	a := newExtCert(t, nil, extCATemplate("ca-a"))
	b := newExtCert(t, nil, extCATemplate("ca-b"))
	r, rlFile, _ := extReloader(t, a, a.cert, b.cert)
	roots := x509.NewCertPool()
	roots.AddCert(a.cert)
	serial := big.NewInt(5)
	ofA, ofB := extClient(t, a, "of-a", serial), extClient(t, b, "of-b", serial)
	os.WriteFile(rlFile, a.crl(t, time.Now().Add(time.Hour), serial), 0o600)
	reload(t, r)
	dial := func(c *tls.Certificate) error {
		_, _, srvErr, cliErr := handshake(t, r.TLSConfig(), ClientConfig(c, roots, ""))
		return errors.Join(srvErr, cliErr)
	}
	if err := dial(ofA.credential()); !errors.Is(err, ErrRevoked) {
		t.Errorf("A's certificate 5 on A's CRL: %v, want ErrRevoked", err)
	}
	if err := dial(ofB.credential()); err != nil {
		t.Errorf("B's certificate 5, on no CRL of B: %v", err)
	}
	if err := r.Recheck([]*x509.Certificate{ofB.cert}, time.Now()); err != nil {
		t.Errorf("B's certificate 5 checked again: %v", err)
	}
}

// TestCRLFileWithOneCRLPerCA: a revocation file may hold a CRL of each CA
// (the root's revoking intermediates, an intermediate's revoking leaves),
// as `cat root.crl inter.crl` writes it; each one counts. Before, only the
// first CRL of the file was read and the others silently ignored.
func TestCRLFileWithOneCRLPerCA(t *testing.T) {
	root := newExtCert(t, nil, extCATemplate("root"))
	inter := newExtCert(t, root, extCATemplate("intermediate"))
	r, rlFile, roots := extReloader(t, root, root.cert, inter.cert)
	revoked, kept := extClient(t, inter, "revoked", nil), extClient(t, inter, "kept", nil)
	crls := append(root.crl(t, time.Now().Add(time.Hour)), inter.crl(t, time.Now().Add(time.Hour), revoked.cert.SerialNumber)...)
	os.WriteFile(rlFile, crls, 0o600)
	reload(t, r)
	dial := func(c *tls.Certificate) error {
		_, _, srvErr, cliErr := handshake(t, r.TLSConfig(), ClientConfig(c, roots, ""))
		return errors.Join(srvErr, cliErr)
	}
	if err := dial(revoked.credential(inter)); !errors.Is(err, ErrRevoked) {
		t.Errorf("a leaf on the intermediate's CRL, the file's second: %v, want ErrRevoked", err)
	}
	if err := dial(kept.credential(inter)); err != nil {
		t.Errorf("a leaf on no CRL: %v", err)
	}
}

// TestHandshakeVerifiedByTheTrustAtItsEnd: a client that sends its
// ClientHello before its certificate is revoked and its certificate after
// is verified against the revocation list in use when the certificate
// arrives, not the one of its ClientHello: the client chooses how long
// that takes, and a handshake held open across the revocation used to let
// the revoked certificate in for good (the trust loop checks connections
// again only at the reload itself).
func TestHandshakeVerifiedByTheTrustAtItsEnd(t *testing.T) {
	root := newExtCert(t, nil, extCATemplate("root"))
	r, rlFile, roots := extReloader(t, root, root.cert)
	clock := &fakeClock{t: time.Now()}
	r.now = clock.now
	stolen := extClient(t, root, "stolen", nil)
	conf := ClientConfig(nil, roots, "")
	conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		// The node has chosen its config; now the operator revokes.
		os.WriteFile(rlFile, root.crl(t, time.Now().Add(time.Hour), stolen.cert.SerialNumber), 0o600)
		clock.step()
		if gen := r.Generation(); r.Current() != nil && r.Generation() == gen {
			t.Error("the revocation was not loaded")
		}
		return stolen.credential(), nil
	}
	_, _, srvErr, cliErr := handshake(t, r.TLSConfig(), conf)
	if !errors.Is(srvErr, ErrRevoked) {
		t.Errorf("a certificate revoked during its handshake: server %v, client %v; want ErrRevoked", srvErr, cliErr)
	}
}

// TestSerialListRevokesLeavesOnly: a text list names serials without an
// issuer, so it revokes leaves of any CA but never a CA certificate: with
// the sequential serials of `openssl ca`, revoking leaf 2 must not revoke
// an intermediate that is also number 2, and with it its whole subtree.
// A CRL past its NextUpdate still revokes: what it lists stays revoked.
func TestSerialListRevokesLeavesOnly(t *testing.T) {
	root := newExtCert(t, nil, extCATemplate("root"))
	interTmpl := extCATemplate("intermediate")
	interTmpl.SerialNumber = big.NewInt(2)
	inter := newExtCert(t, root, interTmpl)
	r, rlFile, _ := extReloader(t, root, root.cert)
	leaf2, other := extClient(t, root, "leaf-2", big.NewInt(2)), extClient(t, inter, "under-intermediate", big.NewInt(3))
	os.WriteFile(rlFile, []byte("02 # leaf-2\n"), 0o600)
	reload(t, r)
	if err := r.Recheck([]*x509.Certificate{leaf2.cert}, time.Now()); !errors.Is(err, ErrRevoked) {
		t.Errorf("leaf 2 on the serial list: %v, want ErrRevoked", err)
	}
	if err := r.Recheck([]*x509.Certificate{other.cert, inter.cert}, time.Now()); err != nil {
		t.Errorf("a leaf under intermediate 2, with serial 2 on the text list: %v", err)
	}
	os.WriteFile(rlFile, root.crl(t, time.Now().Add(-time.Hour), inter.cert.SerialNumber), 0o600)
	reload(t, r)
	if err := r.Recheck([]*x509.Certificate{other.cert, inter.cert}, time.Now()); !errors.Is(err, ErrRevoked) {
		t.Errorf("under an intermediate on a CRL past its NextUpdate: %v, want ErrRevoked", err)
	}
}
