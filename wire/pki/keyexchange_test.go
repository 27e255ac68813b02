package pki

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
)

// TestKeyExchange: by default a node's handshake with a Go client uses
// the post-quantum hybrid; KeyExchangeX25519 makes it X25519, and only
// when asked for.
func TestKeyExchange(t *testing.T) {
	dataDir := t.TempDir()
	l := ensureLocal(t, dataDir)
	opCert, pool, err := LocalOperator(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want tls.CurveID
	}{{"", tls.X25519MLKEM768}, {"hybrid", tls.X25519MLKEM768}, {"x25519", tls.X25519}, {" X25519 ", tls.X25519}} {
		k, err := ParseKeyExchange(tc.name)
		if err != nil {
			t.Fatalf("%q: %v", tc.name, err)
		}
		r, err := NewReloader(ServerCredentials{Cert: l.Node, ClientCAs: []*x509.Certificate{l.CA}, KeyExchange: k})
		if err != nil {
			t.Fatal(err)
		}
		srv, cli, srvErr, cliErr := handshake(t, r.TLSConfig(), ClientConfig(&opCert, pool, ""))
		if srvErr != nil || cliErr != nil {
			t.Fatalf("%q: handshake: server %v, client %v", tc.name, srvErr, cliErr)
		}
		if srv.CurveID != tc.want || cli.CurveID != tc.want {
			t.Errorf("%q: key exchange %v (client %v), want %v", tc.name, srv.CurveID, cli.CurveID, tc.want)
		}
	}
	if _, err := ParseKeyExchange("p256"); err == nil {
		t.Error("ParseKeyExchange(p256): no error")
	}
}
