package pki

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// ErrRevoked means a peer presented a revoked certificate.
var ErrRevoked = errors.New("certificate revoked")

// RevocationList is what a node's revocation file revokes. The zero value
// and nil revoke nothing. It is not modified after loading, so it is safe
// for concurrent use.
//
// Serial numbers are unique only per issuer (X.509), so the two forms
// differ in scope. A CRL's entries revoke certificates of the CA that
// signed it, and only those: a leaf, or an intermediate CA (and with it
// every certificate it issued). A text list names serials without an
// issuer: it revokes a leaf certificate with such a serial whoever issued
// it, and never a CA certificate (sequential serials of different CAs
// collide, and revoking leaf 02 must not revoke an intermediate 02 with
// its whole subtree).
type RevocationList struct {
	serials map[string]struct{} // text list: leaf serials, lower-case hex, no leading zeros
	crls    []crlScope
}

// crlScope is one CRL: the serials it revokes among its CA's certificates.
type crlScope struct {
	issuer  []byte // RawSubject of the CA that signed the CRL
	keyID   []byte // that CA's SubjectKeyId, if known
	serials map[string]struct{}
	// name is the CA's name, for logs; nextUpdate the CRL's NextUpdate
	// (zero if it names none).
	name       string
	nextUpdate time.Time
}

// covers reports whether c was issued by the scope's CA: the same issuer
// name, and the same key where both name theirs.
func (s *crlScope) covers(c *x509.Certificate) bool {
	if !bytes.Equal(c.RawIssuer, s.issuer) {
		return false
	}
	return len(s.keyID) == 0 || len(c.AuthorityKeyId) == 0 || bytes.Equal(c.AuthorityKeyId, s.keyID)
}

// LoadRevocations reads a revocation list: standard X.509 CRLs (PEM
// "X509 CRL" blocks, one per CA, or one DER CRL, as `openssl ca -gencrl`
// writes), or a text file with one hex serial number per line. In the
// text form blank lines and text after '#' are ignored; "0x" prefixes and
// the colons of openssl's "0a:1b:..." spelling are accepted. A CRL's
// signature is not checked here (see LoadRevocationsFrom); its entries
// apply to the certificates of the issuer it names.
func LoadRevocations(path string) (*RevocationList, error) {
	return LoadRevocationsFrom(path, nil)
}

// LoadRevocationsFrom reads a revocation list like LoadRevocations; each
// CRL must then be signed by one of issuers (when any are given), so a CRL
// of another CA is refused rather than silently applied, and its entries
// apply to the certificates of the CA that signed it.
func LoadRevocationsFrom(path string, issuers []*x509.Certificate) (*RevocationList, error) {
	data, err := readFileMax(path, maxRevocationFile)
	if err != nil {
		return nil, fmt.Errorf("load revocations %s: %w", path, err)
	}
	ders, ok, err := crlDERs(data)
	if err != nil {
		return nil, fmt.Errorf("load revocations %s: %w", path, err)
	}
	if ok {
		rl := &RevocationList{}
		for _, der := range ders {
			scope, err := parseCRL(path, der, issuers)
			if err != nil {
				return nil, err
			}
			rl.crls = append(rl.crls, scope)
		}
		return rl, nil
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

// Revoked reports whether serial is on the list, in the text list or in
// any CRL, whoever issued it. A check of a certificate uses its issuer
// too (see RevocationList).
func (rl *RevocationList) Revoked(serial *big.Int) bool {
	if rl == nil || serial == nil {
		return false
	}
	key := serial.Text(16)
	if _, ok := rl.serials[key]; ok {
		return true
	}
	for _, s := range rl.crls {
		if _, ok := s.serials[key]; ok {
			return true
		}
	}
	return false
}

// NextUpdate returns the earliest NextUpdate of the list's CRLs: by then
// the first of them should have been replaced by a newer one. Zero when
// no CRL names one (or the list is a text list, or nil).
func (rl *RevocationList) NextUpdate() time.Time {
	var first time.Time
	if rl == nil {
		return first
	}
	for _, s := range rl.crls {
		if !s.nextUpdate.IsZero() && (first.IsZero() || s.nextUpdate.Before(first)) {
			first = s.nextUpdate
		}
	}
	return first
}

// Stale returns the CAs (by name) whose CRL is past its NextUpdate at now.
// Such a CRL is still applied (what it revokes stays revoked), but a
// certificate its CA revoked since is not refused: it should be renewed.
func (rl *RevocationList) Stale(now time.Time) []string {
	var names []string
	if rl == nil {
		return nil
	}
	for _, s := range rl.crls {
		if !s.nextUpdate.IsZero() && now.After(s.nextUpdate) {
			names = append(names, s.name)
		}
	}
	return names
}

// revokes reports whether the list revokes c, the leaf of its chain when
// leaf is true, else a CA certificate of it.
func (rl *RevocationList) revokes(c *x509.Certificate, leaf bool) bool {
	if rl == nil || c.SerialNumber == nil {
		return false
	}
	key := c.SerialNumber.Text(16)
	if _, ok := rl.serials[key]; ok && leaf {
		return true
	}
	for i := range rl.crls {
		if _, ok := rl.crls[i].serials[key]; ok && rl.crls[i].covers(c) {
			return true
		}
	}
	return false
}

// check returns an error wrapping ErrRevoked if every one of chains (the
// verified chains of one peer, leaf first) holds a revoked certificate: a
// peer is let in as long as one path to a trusted CA is clean, as when an
// intermediate was re-issued and only its old certificate revoked.
func (rl *RevocationList) check(chains [][]*x509.Certificate) error {
	if rl == nil || len(chains) == 0 {
		return nil
	}
	var first error
	for _, chain := range chains {
		err := rl.checkChain(chain)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

func (rl *RevocationList) checkChain(chain []*x509.Certificate) error {
	for i, c := range chain {
		if !rl.revokes(c, i == 0) {
			continue
		}
		if i == 0 {
			return fmt.Errorf("%w: %q serial %x", ErrRevoked, c.Subject.CommonName, c.SerialNumber)
		}
		return fmt.Errorf("%w: %q: its CA %q serial %x is revoked", ErrRevoked, chain[0].Subject.CommonName,
			c.Subject.CommonName, c.SerialNumber)
	}
	return nil
}

// peerChains are the chains to check for a peer: the verified ones, or
// the certificates as sent when there are none (a config that skipped
// verification).
func peerChains(verified [][]*x509.Certificate, sent []*x509.Certificate) [][]*x509.Certificate {
	if len(verified) > 0 {
		return verified
	}
	return [][]*x509.Certificate{sent}
}

// VerifyPeer returns a tls.Config.VerifyPeerCertificate callback that refuses
// a peer whose verified chains are all revoked: the leaf, or a CA
// certificate of the chain on a CRL of its issuer. It runs after normal
// verification; a peer without a certificate is left to ClientAuth. Go does
// not call this callback on resumed sessions, so servers that issue session
// tickets should prefer VerifyConnection.
func VerifyPeer(revoked *RevocationList) func(rawCerts [][]byte, chains [][]*x509.Certificate) error {
	return func(rawCerts [][]byte, chains [][]*x509.Certificate) error {
		if len(rawCerts) == 0 {
			return nil
		}
		leaf, err := x509.ParseCertificate(rawCerts[0])
		if err != nil {
			return fmt.Errorf("parse peer certificate: %w", err)
		}
		return revoked.check(peerChains(chains, []*x509.Certificate{leaf}))
	}
}

// VerifyConnection returns a tls.Config.VerifyConnection callback that
// refuses a revoked peer as VerifyPeer does. Unlike VerifyPeer it also
// runs on resumed sessions, so a certificate revoked after a client got a
// session ticket cannot slip back in.
func VerifyConnection(revoked *RevocationList) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return nil
		}
		return revoked.check(peerChains(cs.VerifiedChains, cs.PeerCertificates[:1]))
	}
}

// crlDERs returns the DER of each CRL of a file of PEM CRLs, or of a DER
// CRL. A text serial list never starts with 0x30 0x82 (an ASN.1
// SEQUENCE), nor holds a PEM CRL.
func crlDERs(data []byte) ([][]byte, bool, error) {
	if len(data) > 2 && data[0] == 0x30 && data[1]&0x80 != 0 {
		return [][]byte{data}, true, nil
	}
	blocks, err := pemBlocks(data)
	if err != nil {
		return nil, false, err
	}
	var ders [][]byte
	for _, block := range blocks {
		if block.Type == "X509 CRL" {
			ders = append(ders, block.Bytes)
		}
	}
	return ders, len(ders) > 0, nil
}

func parseCRL(path string, der []byte, issuers []*x509.Certificate) (crlScope, error) {
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		return crlScope{}, fmt.Errorf("load revocations %s: %w", path, err)
	}
	if err := checkWhole(crl); err != nil {
		return crlScope{}, fmt.Errorf("load revocations %s: the CRL of %q: %w", path, crl.Issuer.String(), err)
	}
	// Unchecked, the CRL's own word for its issuer; checked, the CA whose
	// key signed it, whatever name the CRL gives.
	scope := crlScope{issuer: crl.RawIssuer, keyID: crl.AuthorityKeyId,
		serials: make(map[string]struct{}, len(crl.RevokedCertificateEntries)),
		name:    crl.Issuer.String(), nextUpdate: crl.NextUpdate}
	if len(issuers) > 0 {
		var signer *x509.Certificate
		for _, ca := range issuers {
			if crl.CheckSignatureFrom(ca) == nil {
				signer = ca
				break
			}
		}
		if signer == nil {
			return crlScope{}, fmt.Errorf("load revocations %s: the CRL of %q is not signed by the client CA", path, crl.Issuer.String())
		}
		scope.issuer, scope.keyID, scope.name = signer.RawSubject, signer.SubjectKeyId, signer.Subject.String()
	}
	for _, e := range crl.RevokedCertificateEntries {
		scope.serials[e.SerialNumber.Text(16)] = struct{}{}
	}
	return scope, nil
}

// OIDs of the CRL extensions checkWhole reads (RFC 5280 5.2).
var (
	oidDeltaCRLIndicator   = asn1.ObjectIdentifier{2, 5, 29, 27}
	oidIssuingDistribution = asn1.ObjectIdentifier{2, 5, 29, 28}
)

// issuingDistributionPoint is RFC 5280's extension of that name; only
// indirectCRL matters here. DistributionPointName is a CHOICE, so its tag
// is explicit.
type issuingDistributionPoint struct {
	DistributionPoint asn1.RawValue  `asn1:"optional,explicit,tag:0"`
	OnlyUserCerts     bool           `asn1:"optional,tag:1"`
	OnlyCACerts       bool           `asn1:"optional,tag:2"`
	OnlySomeReasons   asn1.BitString `asn1:"optional,tag:3"`
	IndirectCRL       bool           `asn1:"optional,tag:4"`
	OnlyAttrCerts     bool           `asn1:"optional,tag:5"`
}

// checkWhole refuses a CRL that cannot be read as a list of certificates
// its own CA revoked. A delta CRL lists only the changes since its base:
// taken as whole it would unrevoke all the base revokes. An indirect CRL's
// entries may name certificates of other CAs (their serials would revoke
// this CA's certificates of the same serial). And a CRL or an entry with
// any other critical extension must not be used by a reader that does not
// know it (RFC 5280 6.3.3). A partitioned CRL (an issuing distribution
// point limiting it to some certificates or reasons) only revokes fewer
// than the CA did, and is used.
func checkWhole(crl *x509.RevocationList) error {
	for _, e := range crl.Extensions {
		switch {
		case e.Id.Equal(oidDeltaCRLIndicator):
			return errors.New("a delta CRL lists only the changes since its base CRL and is not supported: give the base (full) CRL")
		case e.Id.Equal(oidIssuingDistribution):
			var idp issuingDistributionPoint
			if rest, err := asn1.Unmarshal(e.Value, &idp); err != nil || len(rest) > 0 {
				return fmt.Errorf("malformed issuing distribution point extension")
			}
			if idp.IndirectCRL {
				return errors.New("an indirect CRL (entries of other CAs) is not supported: give each CA's own CRL")
			}
		case e.Critical:
			return fmt.Errorf("unknown critical extension %s", e.Id)
		}
	}
	for _, entry := range crl.RevokedCertificateEntries {
		for _, e := range entry.Extensions {
			if e.Critical {
				return fmt.Errorf("the entry of serial %x has an unknown critical extension %s", entry.SerialNumber, e.Id)
			}
		}
	}
	return nil
}
