package node

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// TestRevokedIntermediateLosesItsConnections: on a node of a root ->
// intermediate PKI, the root's CRL revoking the intermediate ends the
// connections of every certificate the intermediate issued and refuses
// their new handshakes, as revoking a leaf does; a certificate the root
// signed itself keeps its connection. Before, only the leaf's serial was
// looked at, so a revoked intermediate CA went on letting its whole
// subtree in.
func TestRevokedIntermediateLosesItsConnections(t *testing.T) {
	rootTmpl := caTemplate("root")
	rootTmpl.KeyUsage |= x509.KeyUsageCRLSign
	root := (*testCA)(nil).sign(t, rootTmpl)
	inter := root.sign(t, caTemplate("intermediate"))
	dir := t.TempDir()
	nodeTmpl := leafTemplate("node", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, "edgereg://role/node")
	nodeTmpl.DNSNames = []string{"localhost"}
	nodeCert := root.sign(t, nodeTmpl)
	keyDER, _ := x509.MarshalPKCS8PrivateKey(nodeCert.key)
	certFile, keyFile, caFile := filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key"), filepath.Join(dir, "ca.crt")
	writePEM(t, certFile, &pem.Block{Type: "CERTIFICATE", Bytes: nodeCert.cert.Raw})
	writePEM(t, keyFile, &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	writePEM(t, caFile, &pem.Block{Type: "CERTIFICATE", Bytes: root.cert.Raw})
	revocations := filepath.Join(dir, "revoked.crl")
	os.WriteFile(revocations, nil, 0o600)
	tn := startNode(t, func(c *Config) {
		c.CertFile, c.KeyFile, c.ClientCAFile, c.RevocationFile = certFile, keyFile, caFile, revocations
	})
	roots := x509.NewCertPool()
	roots.AddCert(root.cert)
	clientAuth := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	confOf := func(cert *tls.Certificate) *tls.Config { return pki.ClientConfig(cert, roots, "localhost") }
	subtree := inter.sign(t, leafTemplate("broker-under-intermediate", clientAuth, "edgereg://role/broker")).chain(inter)
	direct := root.sign(t, leafTemplate("reader-of-root", clientAuth, "edgereg://role/client")).chain()
	revokedConn, keptConn := tn.dialTLS(confOf(subtree)), tn.dialTLS(confOf(direct))
	for _, c := range []*client.Conn{revokedConn, keptConn} {
		if _, err := c.Ping(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}

	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1),
		ThisUpdate: time.Now().Add(-time.Minute), NextUpdate: time.Now().Add(time.Hour),
		RevokedCertificateEntries: []x509.RevocationListEntry{{SerialNumber: inter.cert.SerialNumber, RevocationTime: time.Now()}},
	}, root.cert, root.key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, revocations, &pem.Block{Type: "X509 CRL", Bytes: der})
	if !waitClosed(revokedConn) {
		t.Fatal("a certificate of the revoked intermediate still holds its connection 15 s after the root's CRL revoked it")
	}
	if _, err := keptConn.Ping(ctxT(t)); err != nil {
		t.Fatalf("a certificate the root signed itself lost its connection: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: confOf(subtree)}); err == nil {
		_, err = c.Ping(ctx)
		c.Close()
		if err == nil {
			t.Fatal("a certificate of the revoked intermediate got back in with a new handshake")
		}
	}
	if n := metricValue(t, tn, "edgereg_connections_closed_untrusted_total", "reason=revoked"); n != 1 {
		t.Errorf("edgereg_connections_closed_untrusted_total{reason=revoked} = %v, want 1", n)
	}
}

// TestConnectionVerifiedBeforeARevocationAndServedAfterIsChecked: a
// connection whose handshake ended before its certificate was revoked, but
// which the node took up only after the trust loop had checked every
// connection against the new list, is checked when the node takes it up.
// Before, it was checked by no one: the loop had passed, and it checks
// again only at the next reload, so the revoked certificate kept it.
func TestConnectionVerifiedBeforeARevocationAndServedAfterIsChecked(t *testing.T) {
	dir := t.TempDir()
	revocations := filepath.Join(t.TempDir(), "revoked.txt")
	os.WriteFile(revocations, nil, 0o600)
	var tn *testNode
	var serial string
	var armed atomic.Bool
	testHookServeConn = func() {
		if !armed.CompareAndSwap(true, false) {
			return
		}
		// The handshake is done; the revocation and the loop's check of
		// every connection happen before the node records this one.
		before := tn.rechecks.Load()
		os.WriteFile(revocations, []byte(serial+"\n"), 0o600)
		for deadline := time.Now().Add(15 * time.Second); tn.rechecks.Load() == before && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Cleanup(func() { testHookServeConn = nil }) // after the node's shutdown
	tn = startNodeIn(t, dir, "127.0.0.1:0", func(c *Config) { c.RevocationFile = revocations })
	conf := tn.tlsFor(pki.RoleBroker, "stolen", "group-a")
	serial = leafOf(t, conf).SerialNumber.Text(16)
	armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: conf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !waitClosed(c) {
		t.Fatal("a revoked certificate keeps the connection the node took up after checking every connection")
	}
}
