package node

import (
	"crypto/rand"
	"crypto/x509"
	"math/big"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/pki"
)

// TestConnectionExpiresWithItsLastValidChain: a peer whose certificate
// has two verified chains (a cross-signed intermediate: one certificate by
// a root that expires soon, one by a root that lasts, as Let's Encrypt's
// was by DST Root CA X3 and ISRG Root X1) stays valid while either chain
// does. The trust loop closed its connection as expired when the first
// chain's CA expired, though a handshake then verifies it by the other.
func TestConnectionExpiresWithItsLastValidChain(t *testing.T) {
	soonTmpl, lastingTmpl := caTemplate("root-expiring"), caTemplate("root-lasting")
	soonTmpl.NotBefore, soonTmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Minute)
	lastingTmpl.NotBefore, lastingTmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	soon, lasting := (*testCA)(nil).sign(t, soonTmpl), (*testCA)(nil).sign(t, lastingTmpl)
	interTmpl := caTemplate("intermediate")
	interTmpl.NotBefore, interTmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(12*time.Hour)
	bySoon := soon.sign(t, interTmpl)
	leafTmpl := leafTemplate("reader", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, "edgereg://role/client")
	leafTmpl.NotBefore, leafTmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(6*time.Hour)
	leaf := bySoon.sign(t, leafTmpl)
	// The same intermediate (name, key) signed by the lasting root.
	interTmpl2 := caTemplate("intermediate")
	interTmpl2.NotBefore, interTmpl2.NotAfter = interTmpl.NotBefore, interTmpl.NotAfter
	byLasting := lasting.signKey(t, interTmpl2, bySoon)

	roots, inters := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(soon.cert)
	roots.AddCert(lasting.cert)
	inters.AddCert(bySoon.cert)
	inters.AddCert(byLasting.cert)
	chains, err := leaf.cert.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil || len(chains) != 2 {
		t.Fatalf("%d chains, %v; want 2", len(chains), err)
	}
	for _, order := range [][][]*x509.Certificate{chains, {chains[1], chains[0]}} {
		if got := pki.LastExpiry(order); !got.Equal(leaf.cert.NotAfter) {
			t.Errorf("connection valid until %s (the expiring root's %s), want the leaf's %s: the lasting chain holds till then",
				got.Format(time.TimeOnly), soon.cert.NotAfter.Format(time.TimeOnly), leaf.cert.NotAfter.Format(time.TimeOnly))
		}
	}
}

// signKey signs tmpl with ca for the key of holder, as a cross-signed
// certificate is: the same subject and key, another issuer.
func (ca *testCA) signKey(t *testing.T, tmpl *x509.Certificate, holder *testCA) *testCA {
	t.Helper()
	tmpl.SerialNumber = big.NewInt(testSerial.Add(1) + time.Now().UnixNano())
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &holder.key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: c, key: holder.key}
}
