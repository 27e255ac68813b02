package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// ErrNoLocalCA means a data directory has no local CA yet.
var ErrNoLocalCA = errors.New("no local CA")

// testHookPairMismatch, when set, runs after each read of a pair whose
// key does not match its certificate.
var testHookPairMismatch func()

// LoadCredentials loads a certificate and key (PEM) and a CA bundle to trust.
// Errors name the file that could not be used.
func LoadCredentials(certFile, keyFile, caFile string) (tls.Certificate, *x509.CertPool, error) {
	certPEM, err := readFileMax(certFile, maxPEMFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("load certificate %s: %w", certFile, err)
	}
	keyPEM, err := readFileMax(keyFile, maxPEMFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("load key %s: %w", keyFile, err)
	}
	if _, err := pemBlocks(certPEM); err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("load certificate %s: %w", certFile, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("load key pair %s, %s: %w", certFile, keyFile, err)
	}
	pool, err := loadPool(caFile)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return cert, pool, nil
}

// loadPool reads a PEM bundle of CA certificates.
func loadPool(caFile string) (*x509.CertPool, error) {
	caPEM, err := readFileMax(caFile, maxPEMFile)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w", caFile, err)
	}
	if _, err := pemBlocks(caPEM); err != nil {
		return nil, fmt.Errorf("load CA %s: %w", caFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("load CA %s: no PEM certificates found", caFile)
	}
	return pool, nil
}

// LocalOperator loads the operator credential EnsureLocal wrote into
// dataDir/tls, for the CLI on the node's machine. If dataDir has no CA the
// error wraps ErrNoLocalCA and tells the user what to do.
func LocalOperator(dataDir string) (tls.Certificate, *x509.CertPool, error) {
	dir := TLSDir(dataDir)
	caFile := filepath.Join(dir, "ca.crt")
	ok, err := exists(caFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("load CA %s: %w", caFile, err)
	}
	if !ok {
		return tls.Certificate{}, nil, fmt.Errorf(
			"%w in %s: start a node first (edgereg node --data %s) or pass --cert/--key/--ca",
			ErrNoLocalCA, dir, dataDir)
	}
	return loadPairSettled(filepath.Join(dir, "operator.crt"), filepath.Join(dir, "operator.key"), caFile)
}

// pairReads is how often loadPairSettled reads a pair whose key does not
// match its certificate, pairPause apart, before that is an error.
const (
	pairReads = 5
	pairPause = 50 * time.Millisecond
)

// loadPairSettled is LoadCredentials for a pair the local CA may be
// renewing meanwhile: it writes the key, then the certificate, each file
// replaced whole, so a reader between the two writes finds a new key with
// the old certificate. Such a pair is read again: the second write follows
// within milliseconds, where a pair that never matches stays an error.
func loadPairSettled(certFile, keyFile, caFile string) (tls.Certificate, *x509.CertPool, error) {
	for i := 1; ; i++ {
		cert, pool, err := LoadCredentials(certFile, keyFile, caFile)
		if err == nil || !isPairMismatch(err) {
			return cert, pool, err
		}
		if testHookPairMismatch != nil {
			testHookPairMismatch()
		}
		if i == pairReads {
			return cert, pool, err
		}
		time.Sleep(pairPause)
	}
}

// isPairMismatch reports whether err is crypto/tls refusing a key that is
// not the certificate's (it has no error value of its own for it).
func isPairMismatch(err error) bool {
	return strings.Contains(err.Error(), "private key does not match public key")
}
