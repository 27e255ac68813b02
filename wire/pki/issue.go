package pki

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/edgereg/edgereg/wire/datadir"
)

// ErrCAExists means InitCA was asked to create a CA where one already is.
// ErrCredentialExists means a credential would overwrite existing files.
var (
	ErrCAExists         = errors.New("a CA already exists")
	ErrCredentialExists = errors.New("credential already exists")
)

// InitCA creates a new local CA in dataDir/tls, with the operator
// credential for the CLI, and refuses (ErrCAExists) if one is there:
// replacing a CA orphans every credential it signed.
func InitCA(dataDir string) (*Local, error) {
	dir := TLSDir(dataDir)
	if ok, err := exists(filepath.Join(dir, "ca.crt")); err != nil || ok {
		if err == nil {
			err = fmt.Errorf("%w in %s", ErrCAExists, dir)
		}
		return nil, err
	}
	if err := datadir.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	l, err := loadOrCreateCA(dir)
	if err != nil {
		return nil, err
	}
	if err := l.ensureOperator(); err != nil {
		return nil, err
	}
	return l, nil
}

// OpenLocal loads the existing CA of dataDir for issuing and changes
// nothing on disk. With no CA there the error wraps ErrNoLocalCA: unlike
// EnsureLocal it never creates one, so a mistyped --data cannot produce
// credentials from a CA nobody trusts.
func OpenLocal(dataDir string) (*Local, error) {
	dir := TLSDir(dataDir)
	ok, err := exists(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("%w in %s: create one with `edgereg cert init --data %s`, or give the --data of the node whose CA should sign",
			ErrNoLocalCA, dir, dataDir)
	}
	return loadOrCreateCA(dir)
}

// Request is a credential to issue.
type Request struct {
	Role Role
	// Name is the certificate's common name and the files' base name.
	Name string
	// Groups limit a broker credential to these broker groups.
	Groups []string
	// Hosts are extra DNS names and IP addresses for a node certificate,
	// besides Name and the loopback names.
	Hosts []string
	// Validity is how long the credential is valid from now.
	Validity time.Duration
}

// IssueRequest issues like Issue, with r.Hosts added to a node certificate.
func (l *Local) IssueRequest(r Request) (certPEM, keyPEM []byte, err error) {
	if err := checkRequest(r.Role, r.Name, r.Groups); err != nil {
		return nil, nil, err
	}
	if len(r.Hosts) > 0 && r.Role != RoleNode {
		return nil, nil, fmt.Errorf("issue %q: extra names are for role %s only", r.Name, RoleNode)
	}
	if r.Validity <= 0 {
		return nil, nil, fmt.Errorf("issue %s: validity %s must be positive", r.Name, r.Validity)
	}
	var hosts []string
	if r.Role == RoleNode {
		hosts = nodeHosts(append([]string{r.Name}, r.Hosts...))
	}
	now := clock()
	return l.issue(r.Role, r.Name, r.Groups, hosts, now.Add(-clockSkew), now.Add(r.Validity))
}

// WriteCredential issues r and writes outDir/NAME.crt, outDir/NAME.key
// (0600) and outDir/ca.crt. Unless force is set it refuses, before issuing
// anything, to replace an existing NAME.crt or NAME.key, or a ca.crt of
// another CA (ErrCredentialExists).
func (l *Local) WriteCredential(r Request, outDir string, force bool) error {
	if err := checkRequest(r.Role, r.Name, r.Groups); err != nil {
		return err
	}
	base := filepath.Join(outDir, r.Name)
	caPath := filepath.Join(outDir, "ca.crt")
	if !force {
		for _, p := range []string{base + ".crt", base + ".key"} {
			if ok, err := exists(p); err != nil || ok {
				if err == nil {
					err = fmt.Errorf("%w: %s (give --force to replace it)", ErrCredentialExists, p)
				}
				return err
			}
		}
		if old, err := os.ReadFile(caPath); err == nil && !bytes.Equal(old, encodeCert(l.CA.Raw)) {
			return fmt.Errorf("%w: %s holds another CA's certificate (give --force to replace it)", ErrCredentialExists, caPath)
		}
	}
	certPEM, keyPEM, err := l.IssueRequest(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(outDir, dirMode); err != nil {
		return fmt.Errorf("create %s: %w", outDir, err)
	}
	if err := writePair(base+".crt", base+".key", certPEM, keyPEM); err != nil {
		return err
	}
	return datadir.WriteFile(caPath, encodeCert(l.CA.Raw), certMode)
}

// CopyCredential copies NAME.crt, NAME.key and ca.crt from one directory
// to another (key 0600), after checking that the pair matches and chains to
// ca.crt. A Kubernetes init container uses it so each node's container
// sees only its own key.
func CopyCredential(name, fromDir, outDir string) error {
	if err := checkRequest(RoleNode, name, nil); err != nil {
		return err
	}
	src := filepath.Join(fromDir, name)
	cert, pool, err := LoadCredentials(src+".crt", src+".key", filepath.Join(fromDir, "ca.crt"))
	if err != nil {
		return err
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("%s.crt is not signed by %s: %w", src, filepath.Join(fromDir, "ca.crt"), err)
	}
	if err := os.MkdirAll(outDir, dirMode); err != nil {
		return fmt.Errorf("create %s: %w", outDir, err)
	}
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{name + ".key", keyMode}, {name + ".crt", certMode}, {"ca.crt", certMode}} {
		b, err := os.ReadFile(filepath.Join(fromDir, f.name))
		if err != nil {
			return err
		}
		if err := datadir.WriteFile(filepath.Join(outDir, f.name), b, f.mode); err != nil {
			return err
		}
	}
	return nil
}
