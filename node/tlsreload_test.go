package node

import (
	"crypto/tls"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/pki"
)

// TestNodeReloadsCredentials: a node on issued credentials picks up a new
// certificate and a changed revocation list without a restart (they used
// to be read once at start).
func TestNodeReloadsCredentials(t *testing.T) {
	ca, err := pki.EnsureLocal(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	creds := t.TempDir()
	issueNode := func() {
		t.Helper()
		if err := ca.WriteCredential(pki.Request{Role: pki.RoleNode, Name: "edgereg-0", Validity: time.Hour}, creds, true); err != nil {
			t.Fatal(err)
		}
	}
	issueNode()
	revocations := filepath.Join(creds, "revoked.txt")
	os.WriteFile(revocations, nil, 0o600)
	tn := startNode(t, func(c *Config) {
		c.CertFile = filepath.Join(creds, "edgereg-0.crt")
		c.KeyFile = filepath.Join(creds, "edgereg-0.key")
		c.ClientCAFile = filepath.Join(creds, "ca.crt")
		c.RevocationFile = revocations
	})
	certPEM, keyPEM, err := ca.Issue(pki.RoleClient, "reader", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// ping dials afresh and returns the serial the node served.
	ping := func() (*big.Int, error) {
		leaf, err := tn.servedLeaf(&reader, ca.CAPool)
		if err != nil {
			return nil, err
		}
		return leaf.SerialNumber, nil
	}
	first, err := ping()
	if err != nil {
		t.Fatal(err)
	}
	// until polls ping for up to 15 s (the node looks at its files once a
	// second) until done says so.
	until := func(what string, done func(*big.Int, error) bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if done(ping()) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the node never %s", what)
			}
		}
	}
	issueNode()
	until("served the new certificate", func(s *big.Int, err error) bool { return err == nil && s.Cmp(first) != 0 })
	os.WriteFile(revocations, []byte(reader.Leaf.SerialNumber.Text(16)+"\n"), 0o600)
	until("refused the revoked client", func(_ *big.Int, err error) bool { return err != nil })
	os.WriteFile(revocations, nil, 0o600)
	until("let the client in again", func(_ *big.Int, err error) bool { return err == nil })
}
