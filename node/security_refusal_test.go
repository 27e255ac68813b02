package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// TestRefusedCertificatesGetTheDocumentedAlerts: what a peer sees when
// its certificate is refused at the handshake is what PROTOCOL.md 1.1
// says: revoked, bad_certificate (0x12a); expired, certificate_expired
// (0x12d); of another CA, unknown_ca (0x130); none, certificate_required
// (0x174).
func TestRefusedCertificatesGetTheDocumentedAlerts(t *testing.T) {
	dir := t.TempDir()
	local, err := pki.EnsureLocal(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	revokedPEM, revokedKey, _ := local.Issue(pki.RoleOperator, "revoked-operator", nil, time.Hour)
	revoked, _ := tls.X509KeyPair(revokedPEM, revokedKey)
	leaf, _ := x509.ParseCertificate(revoked.Certificate[0])
	revocations := filepath.Join(t.TempDir(), "revoked.txt")
	os.WriteFile(revocations, []byte(fmt.Sprintf("%x\n", leaf.SerialNumber)), 0o600)
	tn := startNodeIn(t, dir, "127.0.0.1:0", func(c *Config) { c.RevocationFile = revocations })
	foreign, _ := pki.EnsureLocal(t.TempDir(), nil)
	fPEM, fKey, _ := foreign.Issue(pki.RoleOperator, "foreign", nil, time.Hour)
	fCert, _ := tls.X509KeyPair(fPEM, fKey)
	cases := []struct {
		name string
		cert *tls.Certificate
		want string
	}{
		{"revoked", &revoked, "0x12a"},
		{"expired", ptr(expiredCert(t, dir)), "0x12d"},
		{"foreign CA", &fCert, "0x130"},
		{"no certificate", nil, "0x174"},
	}
	for _, tc := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: pki.ClientConfig(tc.cert, tn.local.CAPool, "localhost")})
		if err == nil {
			_, err = c.Ping(ctx)
			c.Close()
		}
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want the alert %s", tc.name, err, tc.want)
		}
	}
}
