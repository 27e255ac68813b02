package pki

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
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

// LoadRevocations reads a revocation list: a standard X.509 CRL (PEM
// "X509 CRL" or DER, as `openssl ca -gencrl` writes), or a text file with
// one hex serial number per line. In the text form blank lines and text
// after '#' are ignored; "0x" prefixes and the colons of openssl's
// "0a:1b:..." spelling are accepted. A CRL's signature is not checked here
// (see LoadRevocationsFrom).
func LoadRevocations(path string) (*RevocationList, error) {
	return LoadRevocationsFrom(path, nil)
}

// LoadRevocationsFrom reads a revocation list like LoadRevocations; a CRL
// must then be signed by one of issuers (when any are given), so a CRL of
// another CA is refused rather than silently applied.
func LoadRevocationsFrom(path string, issuers []*x509.Certificate) (*RevocationList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load revocations %s: %w", path, err)
	}
	if der, ok := crlDER(data); ok {
		return parseCRL(path, der, issuers)
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

// crlDER returns the DER of a CRL in PEM or DER form. A text serial list
// never starts with 0x30 0x82 (an ASN.1 SEQUENCE), nor holds a PEM CRL.
func crlDER(data []byte) ([]byte, bool) {
	if block, _ := pem.Decode(data); block != nil && block.Type == "X509 CRL" {
		return block.Bytes, true
	}
	if len(data) > 2 && data[0] == 0x30 && data[1]&0x80 != 0 {
		return data, true
	}
	return nil, false
}

func parseCRL(path string, der []byte, issuers []*x509.Certificate) (*RevocationList, error) {
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		return nil, fmt.Errorf("load revocations %s: %w", path, err)
	}
	if len(issuers) > 0 {
		signed := false
		for _, ca := range issuers {
			if crl.CheckSignatureFrom(ca) == nil {
				signed = true
				break
			}
		}
		if !signed {
			return nil, fmt.Errorf("load revocations %s: the CRL is not signed by the client CA", path)
		}
	}
	rl := &RevocationList{serials: make(map[string]struct{}, len(crl.RevokedCertificateEntries))}
	for _, e := range crl.RevokedCertificateEntries {
		rl.serials[e.SerialNumber.Text(16)] = struct{}{}
	}
	return rl, nil
}
