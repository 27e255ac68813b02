package node

import (
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/pki"
)

// localCRL writes to path a CRL of the local CA in dir revoking serial,
// with the given NextUpdate.
func localCRL(t *testing.T, dir, path string, serial *big.Int, nextUpdate time.Time) {
	t.Helper()
	ca, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls", "ca.crt"), filepath.Join(dir, "tls", "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(ca.Certificate[0])
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1),
		ThisUpdate: nextUpdate.Add(-48 * time.Hour), NextUpdate: nextUpdate,
		RevokedCertificateEntries: []x509.RevocationListEntry{{SerialNumber: serial, RevocationTime: time.Now()}},
	}, caCert, ca.PrivateKey.(crypto.Signer))
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, &pem.Block{Type: "X509 CRL", Bytes: der})
}

// TestStaleCRLIsWarnedOf: a CRL past its NextUpdate is still applied (a
// late renewal must not lock everyone out), but the operator must learn
// that it is stale, since what its CA revoked since is let in: the node
// logs a warning naming the CA and shows the earliest NextUpdate and the
// number of stale CRLs as metrics. Before, nothing said so.
func TestStaleCRLIsWarnedOf(t *testing.T) {
	dir := t.TempDir()
	if _, err := pki.EnsureLocal(dir, nil); err != nil {
		t.Fatal(err)
	}
	crl := filepath.Join(t.TempDir(), "ca.crl")
	nextUpdate := time.Now().Add(-time.Hour).Truncate(time.Second)
	localCRL(t, dir, crl, big.NewInt(0x5eed), nextUpdate)
	var logs syncBuffer
	tn := startNodeIn(t, dir, "127.0.0.1:0", func(c *Config) {
		c.RevocationFile = crl
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	if _, err := tn.dial(pki.RoleClient).Ping(ctxT(t)); err != nil {
		t.Fatalf("a stale CRL locked a client out: %v", err)
	}
	for deadline := time.Now().Add(15 * time.Second); len(logs.lines("past its NextUpdate")) == 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	lines := logs.lines("past its NextUpdate")
	if len(lines) == 0 {
		t.Fatal("no warning of a CRL past its NextUpdate in 15 s")
	}
	if len(lines) != 1 || !containsAll(lines[0], "level=WARN", "edgereg local CA") {
		t.Errorf("warnings of the stale CRL: %q, want one naming the CA", lines)
	}
	if got := metricValue(t, tn, "edgereg_revocation_stale_crls"); got != 1 {
		t.Errorf("edgereg_revocation_stale_crls = %v, want 1", got)
	}
	if got := metricValue(t, tn, "edgereg_revocation_next_update_timestamp_seconds"); got != float64(nextUpdate.Unix()) {
		t.Errorf("edgereg_revocation_next_update_timestamp_seconds = %v, want %d", got, nextUpdate.Unix())
	}
	// Renewed: the metric follows, and nothing more is said.
	renewed := time.Now().Add(time.Hour).Truncate(time.Second)
	localCRL(t, dir, crl, big.NewInt(0x5eed), renewed)
	for deadline := time.Now().Add(15 * time.Second); metricValue(t, tn, "edgereg_revocation_stale_crls") != 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if got := metricValue(t, tn, "edgereg_revocation_next_update_timestamp_seconds"); got != float64(renewed.Unix()) {
		t.Errorf("after renewal: next update %v, want %d", got, renewed.Unix())
	}
	if got := len(logs.lines("past its NextUpdate")); got != 1 {
		t.Errorf("%d warnings after renewal, want still 1", got)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
