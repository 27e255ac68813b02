package pki

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
)

// ErrRevoked means a peer presented a revoked certificate.
var ErrRevoked = errors.New("certificate revoked")

// RevocationList is a set of revoked certificate serial numbers. The zero
// value and nil revoke nothing. It is not modified after loading, so it is
// safe for concurrent use.
type RevocationList struct {
	serials map[string]struct{} // lower-case hex, no leading zeros
}

// LoadRevocations reads a text file with one hex serial number per line.
// Blank lines and text after '#' are ignored; "0x" prefixes and the colons
// of openssl's "0a:1b:..." spelling are accepted.
func LoadRevocations(path string) (*RevocationList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load revocations %s: %w", path, err)
	}
	rl := &RevocationList{serials: make(map[string]struct{})}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		text = strings.TrimSpace(text)
		if text == "" {
			continue
		}
		hex := strings.ReplaceAll(strings.TrimPrefix(strings.ToLower(text), "0x"), ":", "")
		n, ok := new(big.Int).SetString(hex, 16)
		if !ok || n.Sign() < 0 {
			return nil, fmt.Errorf("load revocations %s:%d: bad serial %q", path, line, text)
		}
		rl.serials[n.Text(16)] = struct{}{}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("load revocations %s: %w", path, err)
	}
	return rl, nil
}

// Revoked reports whether serial is on the list.
func (rl *RevocationList) Revoked(serial *big.Int) bool {
	if rl == nil || serial == nil {
		return false
	}
	_, ok := rl.serials[serial.Text(16)]
	return ok
}

// check returns an error wrapping ErrRevoked if leaf is revoked.
func (rl *RevocationList) check(leaf *x509.Certificate) error {
	if !rl.Revoked(leaf.SerialNumber) {
		return nil
	}
	return fmt.Errorf("%w: %q serial %x", ErrRevoked, leaf.Subject.CommonName, leaf.SerialNumber)
}

// VerifyPeer returns a tls.Config.VerifyPeerCertificate callback that refuses
// a revoked leaf certificate. It runs after normal verification; a peer
// without a certificate is left to ClientAuth. Go does not call this
// callback on resumed sessions, so servers that issue session tickets should
// prefer VerifyConnection.
func VerifyPeer(revoked *RevocationList) func(rawCerts [][]byte, chains [][]*x509.Certificate) error {
	return func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
		if len(rawCerts) == 0 {
			return nil
		}
		leaf, err := x509.ParseCertificate(rawCerts[0])
		if err != nil {
			return fmt.Errorf("parse peer certificate: %w", err)
		}
		return revoked.check(leaf)
	}
}

// VerifyConnection returns a tls.Config.VerifyConnection callback that
// refuses a revoked peer certificate. Unlike VerifyPeer it also runs on
// resumed sessions, so a certificate revoked after a client got a session
// ticket cannot slip back in.
func VerifyConnection(revoked *RevocationList) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return nil
		}
		return revoked.check(cs.PeerCertificates[0])
	}
}
