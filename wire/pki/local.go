package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/edgereg/edgereg/wire/datadir"
)

// Lifetimes and file names of the local CA.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// clockSkew backdates NotBefore so peers with slightly slow clocks
	// accept a certificate issued a moment ago.
	clockSkew = 5 * time.Minute

	localOperatorName = "local-operator"
	nodeName          = "edgereg-node"
)

// RenewBefore is how close to its expiry a node or operator certificate of
// the local CA is re-issued by EnsureLocal: at a start, and by a running
// node, which calls it again once its certificate comes this close, so a
// node that runs for a year never serves an expired one.
const RenewBefore = 30 * 24 * time.Hour

// clock is the local CA's time source; tests set it.
var clock = time.Now

// defaultHosts are always in the node certificate so local tools work.
var defaultHosts = []string{"127.0.0.1", "::1", "localhost"}

// TLSDir returns the directory holding the local CA: dataDir/tls.
func TLSDir(dataDir string) string { return filepath.Join(dataDir, "tls") }

// Local is the certificate authority of one data directory and this node's
// own certificate. It is created or loaded by EnsureLocal.
type Local struct {
	// Dir is the tls directory (dataDir/tls).
	Dir string
	// CA is the CA certificate.
	CA *x509.Certificate
	// CAPool holds only CA; use it as ClientCAs and RootCAs.
	CAPool *x509.CertPool
	// Node is this node's certificate and key, with Leaf set.
	Node tls.Certificate
	// OperatorExpiry is when the operator certificate expires.
	OperatorExpiry time.Time
	// Issued lists the certificates EnsureLocal issued anew, and why.
	Issued []Issued

	caKey crypto.Signer
}

// Issued says which certificate of the local CA EnsureLocal issued anew,
// and why.
type Issued struct {
	File   string // "node.crt" or "operator.crt", in Local.Dir
	Reason string // e.g. "missing", "expires 2027-01-02, within 30 days"
	// Damaged is set when the files were there but could not be loaded
	// (a damaged key, a certificate and key that do not match).
	Damaged bool
}

// EnsureLocal creates (first call) or loads (later calls) the local CA in
// dataDir/tls, see the package doc for the files. hosts are the IP addresses
// and DNS names the node is reached by; 127.0.0.1, ::1 and localhost are
// always added. The node certificate is re-issued if it is missing, invalid,
// within RenewBefore (30 days) of expiry, or lacks a requested host; the
// operator certificate if it is missing, invalid or within RenewBefore of
// expiry. Local.Issued says what was issued, and why.
func EnsureLocal(dataDir string, hosts []string) (*Local, error) {
	dir := TLSDir(dataDir)
	if err := datadir.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	// MkdirAll leaves an existing directory's mode alone; the CA key is inside.
	if err := os.Chmod(dir, dirMode); err != nil {
		return nil, fmt.Errorf("chmod %s: %w", dir, err)
	}
	l, err := loadOrCreateCA(dir)
	if err != nil {
		return nil, err
	}
	if err := l.ensureNode(nodeHosts(hosts)); err != nil {
		return nil, err
	}
	if err := l.ensureOperator(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Local) path(name string) string { return filepath.Join(l.Dir, name) }

// loadOrCreateCA loads ca.crt/ca.key, creating both when ca.crt is absent.
// A ca.key without ca.crt can only be left by an interrupted creation (the
// key is written first), so nothing was signed with it and it is replaced.
func loadOrCreateCA(dir string) (*Local, error) {
	l := &Local{Dir: dir}
	certPath, keyPath := l.path("ca.crt"), l.path("ca.key")
	ok, err := exists(certPath)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w", certPath, err)
	}
	if !ok {
		return l, l.createCA()
	}
	// A damaged CA is never replaced: every credential it issued would stop
	// working.
	if l.CA, err = readCertFile(certPath); err != nil {
		return nil, fmt.Errorf("load CA %s: %w; restore %s from a backup, or move it aside to create a new CA and re-issue all credentials", certPath, err, dir)
	}
	if l.caKey, err = readKeyFile(keyPath); err != nil {
		return nil, fmt.Errorf("load CA key %s: %w; restore %s from a backup, or move it aside to create a new CA and re-issue all credentials", keyPath, err, dir)
	}
	if !l.CA.IsCA {
		return nil, fmt.Errorf("load CA %s: not a CA certificate", certPath)
	}
	if clock().After(l.CA.NotAfter) {
		return nil, fmt.Errorf("load CA %s: expired on %s; move %s aside to create a new CA and re-issue all credentials",
			certPath, l.CA.NotAfter.Format(time.DateOnly), dir)
	}
	l.CAPool = x509.NewCertPool()
	l.CAPool.AddCert(l.CA)
	return l, nil
}

// createCA makes a new self-signed CA and writes it (key first, see above).
func (l *Local) createCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("create CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return err
	}
	now := clock()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "edgereg local CA"},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // leaves only, no intermediates
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return fmt.Errorf("create CA: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return fmt.Errorf("encode CA key: %w", err)
	}
	if err := datadir.WriteFile(l.path("ca.key"), keyPEM, keyMode); err != nil {
		return err
	}
	if err := datadir.WriteFile(l.path("ca.crt"), encodeCert(der), certMode); err != nil {
		return err
	}
	if l.CA, err = x509.ParseCertificate(der); err != nil {
		return fmt.Errorf("parse new CA: %w", err)
	}
	l.caKey = key
	l.CAPool = x509.NewCertPool()
	l.CAPool.AddCert(l.CA)
	return nil
}

// ensureNode loads node.crt/node.key, re-issuing them when unusable.
func (l *Local) ensureNode(hosts []string) error {
	certPath, keyPath := l.path("node.crt"), l.path("node.key")
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	why := l.nodeCertProblem(pair.Leaf, err, hosts)
	if why.Reason == "" {
		l.Node = pair
		return nil
	}
	now := clock()
	certPEM, keyPEM, err := l.issue(RoleNode, nodeName, nil, hosts, now.Add(-clockSkew), now.Add(leafValidity))
	if err != nil {
		return fmt.Errorf("issue node certificate (%s): %w", why.Reason, err)
	}
	if err := writePair(certPath, keyPath, certPEM, keyPEM); err != nil {
		return err
	}
	if l.Node, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return fmt.Errorf("load new node certificate: %w", err)
	}
	why.File = "node.crt"
	l.Issued = append(l.Issued, why)
	return nil
}

// nodeCertProblem says why the node certificate loaded as leaf (loadErr
// from loading it) is to be issued anew: it does not load, does not chain
// to our CA as a server certificate, has RenewBefore left or less, or does
// not cover a host. No Reason: it is fine.
func (l *Local) nodeCertProblem(leaf *x509.Certificate, loadErr error, hosts []string) Issued {
	if why := l.leafProblem(leaf, loadErr, x509.ExtKeyUsageServerAuth); why.Reason != "" {
		return why
	}
	for _, h := range hosts {
		if leaf.VerifyHostname(h) != nil {
			return Issued{Reason: fmt.Sprintf("does not name host %s", h)}
		}
	}
	return Issued{}
}

// leafProblem says why a certificate of ours for usage (leaf, loaded with
// loadErr) is to be issued anew, as nodeCertProblem, hosts aside.
func (l *Local) leafProblem(leaf *x509.Certificate, loadErr error, usage x509.ExtKeyUsage) Issued {
	switch {
	case errors.Is(loadErr, fs.ErrNotExist):
		return Issued{Reason: "missing"}
	case loadErr != nil:
		return Issued{Reason: fmt.Sprintf("cannot be loaded: %v", loadErr), Damaged: true}
	case !l.verifies(leaf, usage):
		return Issued{Reason: "not valid under this CA (expired, or signed by another)"}
	case leaf.NotAfter.Sub(clock()) < RenewBefore:
		return Issued{Reason: fmt.Sprintf("expires %s, within %d days", leaf.NotAfter.UTC().Format(time.DateOnly), RenewBefore/(24*time.Hour))}
	}
	return Issued{}
}

// ensureOperator issues operator.crt/key when missing, no longer valid
// (expired, or signed by a CA that was replaced) or within RenewBefore of
// expiry.
func (l *Local) ensureOperator() error {
	certPath, keyPath := l.path("operator.crt"), l.path("operator.key")
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	why := l.leafProblem(pair.Leaf, err, x509.ExtKeyUsageClientAuth)
	if why.Reason == "" {
		l.OperatorExpiry = pair.Leaf.NotAfter
		return nil
	}
	now := clock()
	certPEM, keyPEM, err := l.issue(RoleOperator, localOperatorName, nil, nil, now.Add(-clockSkew), now.Add(leafValidity))
	if err != nil {
		return fmt.Errorf("issue operator certificate (%s): %w", why.Reason, err)
	}
	if err := writePair(certPath, keyPath, certPEM, keyPEM); err != nil {
		return err
	}
	issued, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("load new operator certificate: %w", err)
	}
	l.OperatorExpiry = issued.Leaf.NotAfter
	why.File = "operator.crt"
	l.Issued = append(l.Issued, why)
	return nil
}

// verifies reports whether leaf chains to the CA for usage. A leaf "not
// valid yet" was issued here when the clock read later than it does now: the
// clock is behind (a machine without a battery-backed clock, before NTP),
// so the leaf is judged at its own start rather than replaced by one dated
// by that clock, which would have expired once the clock is corrected.
func (l *Local) verifies(leaf *x509.Certificate, usage x509.ExtKeyUsage) bool {
	at := clock()
	if at.Before(leaf.NotBefore) {
		at = leaf.NotBefore
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: l.CAPool, KeyUsages: []x509.ExtKeyUsage{usage}, CurrentTime: at})
	return err == nil
}

// writePair writes key then certificate; a crash in between leaves a
// mismatched pair, which the next load detects and re-issues.
func writePair(certPath, keyPath string, certPEM, keyPEM []byte) error {
	if err := datadir.WriteFile(keyPath, keyPEM, keyMode); err != nil {
		return err
	}
	return datadir.WriteFile(certPath, certPEM, certMode)
}

// Issue creates a key and a certificate signed by the CA, valid from now
// for validity (capped at the CA's expiry). name becomes the CommonName;
// groups (broker role only) restrict which broker groups may be registered.
// For RoleNode, name is also put in the certificate as its host (DNS name or
// IP address), with the loopback names every node certificate carries, so
// the certificate can serve another machine.
func (l *Local) Issue(role Role, name string, groups []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if err := checkRequest(role, name, groups); err != nil {
		return nil, nil, err
	}
	if validity <= 0 {
		return nil, nil, fmt.Errorf("issue %s: validity %s must be positive", name, validity)
	}
	var hosts []string
	if role == RoleNode {
		// Loopback and "localhost" too: clients that dial by bare address
		// verify the name "localhost" (see ClientConfig), so every node
		// certificate of the CA must carry it.
		hosts = nodeHosts([]string{name})
	}
	now := clock()
	return l.issue(role, name, groups, hosts, now.Add(-clockSkew), now.Add(validity))
}

// IssueFiles issues like Issue and writes outDir/<name>.crt,
// outDir/<name>.key (0600) and outDir/ca.crt, ready to copy to another machine.
func (l *Local) IssueFiles(role Role, name string, groups []string, validity time.Duration, outDir string) error {
	certPEM, keyPEM, err := l.Issue(role, name, groups, validity)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(outDir, dirMode); err != nil {
		return fmt.Errorf("create %s: %w", outDir, err)
	}
	base := filepath.Join(outDir, name)
	if err := writePair(base+".crt", base+".key", certPEM, keyPEM); err != nil {
		return err
	}
	return datadir.WriteFile(filepath.Join(outDir, "ca.crt"), encodeCert(l.CA.Raw), certMode)
}

// checkRequest validates what Issue is asked for. name is used as a file
// name by IssueFiles, so it must not escape outDir or clobber ca.crt.
func checkRequest(role Role, name string, groups []string) error {
	if !role.valid() {
		return fmt.Errorf("issue %q: unknown role %q", name, role)
	}
	if name == "" || name == "." || name == ".." || name == "ca" || strings.ContainsAny(name, `/\`) {
		return fmt.Errorf("issue: invalid name %q (must be non-empty, not \"ca\", without path separators)", name)
	}
	if len(groups) > 0 && role != RoleBroker {
		return fmt.Errorf("issue %q: broker groups are only for role %s", name, RoleBroker)
	}
	if slices.Contains(groups, "") {
		return fmt.Errorf("issue %q: empty broker group name", name)
	}
	return nil
}

// issue signs a new leaf certificate. It takes explicit times so tests can
// make expired certificates; callers validate their arguments first.
func (l *Local) issue(role Role, name string, groups, hosts []string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	// The CA was created at its NotBefore (plus clockSkew): a clock before
	// that is wrong, and a credential dated by it would expire, or not be
	// valid yet, once the clock is corrected.
	if now := clock(); now.Before(l.CA.NotBefore) {
		return nil, nil, fmt.Errorf("issue %s: the system clock (%s) is before the local CA was created (%s): correct the clock (NTP) first",
			name, now.UTC().Format(time.RFC3339), l.CA.NotBefore.Add(clockSkew).UTC().Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	// A leaf outliving its CA would fail verification anyway; say so honestly.
	if notAfter.After(l.CA.NotAfter) {
		notAfter = l.CA.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{roleURI(role)},
	}
	if role == RoleNode {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, g := range groups {
		tmpl.URIs = append(tmpl.URIs, groupURI(g))
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, l.CA, key.Public(), l.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate %q: %w", name, err)
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return encodeCert(der), keyPEM, nil
}

// newSerial returns a random positive 128-bit serial number, unguessable
// and unique without any state on disk.
func newSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("generate serial: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// nodeHosts normalises hosts ("[::1]", "name:port" are accepted), adds the
// loopback defaults and drops duplicates.
func nodeHosts(hosts []string) []string {
	out := slices.Clone(defaultHosts)
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if host, _, err := net.SplitHostPort(h); err == nil {
			h = host
		}
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			h = ip.String() // one spelling per address, so dedup works
		} else {
			h = strings.ToLower(h)
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}
