package node

// Security tests from outside: what an attacker holding some valid
// credential can do over real QUIC on loopback, with real certificates.

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// waitClosed waits up to 15 s (the node re-checks its credentials every
// second) for c's connection to end, and reports whether it did.
func waitClosed(c *client.Conn) bool {
	select {
	case <-c.Done():
		return true
	case <-time.After(15 * time.Second):
		return false
	}
}

// leafOf returns the leaf certificate of a client TLS config.
func leafOf(t *testing.T, conf *tls.Config) *x509.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(conf.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// TestRevokedCertificateLosesItsConnections: revoking a certificate ends
// the connections it already holds, not only its next handshakes. Before,
// a revoked broker kept registering and heartbeating over its connection
// (QUIC keep-alives hold it for ever), and the node did not even re-read
// the list until some new handshake came.
func TestRevokedCertificateLosesItsConnections(t *testing.T) {
	dir := t.TempDir()
	revocations := filepath.Join(t.TempDir(), "revoked.txt")
	os.WriteFile(revocations, nil, 0o600)
	var logs syncBuffer
	tn := startNodeIn(t, dir, "127.0.0.1:0", func(c *Config) {
		c.RevocationFile = revocations
		logTo(&logs)(c)
	})
	ctx := ctxT(t)
	conf := tn.tlsFor(pki.RoleBroker, "stolen", "group-a")
	broker := tn.dialTLS(conf)
	ack, err := broker.Register(ctx, registration("c1", "group-a", 0, "10.0.0.1:1", "t"))
	if err != nil {
		t.Fatal(err)
	}
	reader := tn.dial(pki.RoleClient)
	os.WriteFile(revocations, []byte(leafOf(t, conf).SerialNumber.Text(16)+"\n"), 0o600)
	if !waitClosed(broker) {
		_, err := broker.Heartbeat(ctxT(t), &wire.Heartbeat{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: ack.Lease.Epoch})
		t.Fatalf("the revoked certificate's connection is still open 15 s after the revocation (its heartbeat: %v)", err)
	}
	if _, err := reader.Ping(ctxT(t)); err != nil {
		t.Fatalf("a certificate that was not revoked lost its connection: %v", err)
	}
	if ls := logs.lines("connection closed"); len(ls) != 1 || !strings.Contains(ls[0], "revoked") || !strings.Contains(ls[0], "peer=stolen") {
		t.Errorf("closing logged as %q, want one line naming the certificate and the revocation", ls)
	}
	if n := metricValue(t, tn, "edgereg_connections_closed_untrusted_total", "reason=revoked"); n != 1 {
		t.Errorf("edgereg_connections_closed_untrusted_total{reason=revoked} = %v, want 1", n)
	}
}

// TestRemovedClientCALosesItsConnections: a client CA taken out of the
// node's bundle ends the connections of the certificates it signed.
func TestRemovedClientCALosesItsConnections(t *testing.T) {
	ca1, err := pki.EnsureLocal(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := pki.EnsureLocal(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	creds := t.TempDir()
	if err := ca1.WriteCredential(pki.Request{Role: pki.RoleNode, Name: "edgereg-0", Validity: time.Hour}, creds, true); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(creds, "clients.crt")
	pemOf := func(c *x509.Certificate) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	os.WriteFile(bundle, append(pemOf(ca1.CA), pemOf(ca2.CA)...), 0o600)
	tn := startNode(t, func(c *Config) {
		c.CertFile = filepath.Join(creds, "edgereg-0.crt")
		c.KeyFile = filepath.Join(creds, "edgereg-0.key")
		c.ClientCAFile = bundle
	})
	dialOf := func(ca *pki.Local, name string) *client.Conn {
		certPEM, keyPEM, err := ca.Issue(pki.RoleClient, name, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := tls.X509KeyPair(certPEM, keyPEM)
		return tn.dialTLS(pki.ClientConfig(&cert, ca1.CAPool, "localhost"))
	}
	kept, dropped := dialOf(ca1, "kept"), dialOf(ca2, "dropped")
	ctx := ctxT(t)
	for _, c := range []*client.Conn{kept, dropped} {
		if _, err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(bundle, pemOf(ca1.CA), 0o600)
	if !waitClosed(dropped) {
		t.Fatal("a certificate of the client CA taken out of the bundle still holds its connection 15 s later")
	}
	if _, err := kept.Ping(ctxT(t)); err != nil {
		t.Fatalf("a certificate of the CA still trusted lost its connection: %v", err)
	}
	if n := metricValue(t, tn, "edgereg_connections_closed_untrusted_total", "reason=untrusted"); n != 1 {
		t.Errorf("edgereg_connections_closed_untrusted_total{reason=untrusted} = %v, want 1", n)
	}
}

// TestExpiredCertificateLosesItsConnections: a connection does not
// outlive its certificate: at its NotAfter the node closes it, as the
// handshake would refuse it by then.
func TestExpiredCertificateLosesItsConnections(t *testing.T) {
	dir := t.TempDir()
	tn := startNodeIn(t, dir, "127.0.0.1:0", nil)
	cert := signWithLocalCA(t, dir, time.Now().Add(-time.Hour), time.Now().Add(2*time.Second), "edgereg://role/client")
	c := tn.dialTLS(pki.ClientConfig(&cert, tn.local.CAPool, "localhost"))
	if _, err := c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if !waitClosed(c) {
		t.Fatal("a connection outlived its certificate by 13 s")
	}
	if n := metricValue(t, tn, "edgereg_connections_closed_untrusted_total", "reason=expired"); n != 1 {
		t.Errorf("edgereg_connections_closed_untrusted_total{reason=expired} = %v, want 1", n)
	}
}
