package pki

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The certificate issuer CRL entry extension (RFC 5280 5.3.3).
var oidCertIssuer = asn1.ObjectIdentifier{2, 5, 29, 29}

// crlWith is a PEM CRL of ca revoking serial, with extensions ext on the
// CRL and entryExt on its entry.
func crlWith(t *testing.T, ca *extCA, serial *big.Int, ext, entryExt []pkix.Extension) []byte {
	t.Helper()
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(2),
		ThisUpdate: time.Now().Add(-time.Hour), NextUpdate: time.Now().Add(time.Hour), ExtraExtensions: ext,
		RevokedCertificateEntries: []x509.RevocationListEntry{{SerialNumber: serial, RevocationTime: time.Now(), ExtraExtensions: entryExt}}},
		ca.cert, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})
}

func mustDER(t *testing.T, v any, params string) []byte {
	t.Helper()
	b, err := asn1.MarshalWithParams(v, params)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCRLsThatAreNotWholeAreRefused: the node reads a CRL as the whole
// list of its CA's revoked certificates. A delta CRL lists only what
// changed since its base, so taken as whole it unrevokes everything the
// base revoked; an indirect CRL's entries may belong to other CAs; and
// RFC 5280 (6.3.3) forbids using a CRL with a critical extension the
// reader does not know. Each is refused with a clear error (the last good
// list stays in use). A partitioned CRL (an issuing distribution point,
// critical, as Active Directory Certificate Services writes) is a subset
// of the CA's revocations and is used.
func TestCRLsThatAreNotWholeAreRefused(t *testing.T) {
	ca := newExtCert(t, nil, extCATemplate("ca"))
	serial := big.NewInt(0x77)
	// IssuingDistributionPoint ::= SEQUENCE { ... [4] indirectCRL BOOLEAN ... }
	indirect := mustDER(t, struct {
		Indirect bool `asn1:"optional,tag:4"`
	}{true}, "")
	partition := mustDER(t, struct {
		OnlyUser bool `asn1:"optional,tag:1"`
	}{true}, "")
	// As AD CS writes it: distributionPoint [0] { fullName [0] { URI } }.
	uri := mustDER(t, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte("http://pki.example/ca.crl")}, "")
	fullName := mustDER(t, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: uri}, "")
	dpName := mustDER(t, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: fullName}, "")
	named := mustDER(t, asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: dpName}, "")
	dirName := mustDER(t, pkix.Name{CommonName: "other ca"}.ToRDNSequence(), "")
	issuerNames := mustDER(t, []asn1.RawValue{{Class: asn1.ClassContextSpecific, Tag: 4, IsCompound: true, Bytes: dirName}}, "")
	cases := []struct {
		name          string
		ext, entryExt []pkix.Extension
		want          string // in the error; "" for a CRL that is used
	}{
		{"delta", []pkix.Extension{{Id: oidDeltaCRLIndicator, Critical: true, Value: mustDER(t, 1, "")}}, nil, "delta CRL"},
		{"indirect", []pkix.Extension{{Id: oidIssuingDistribution, Critical: true, Value: indirect}}, nil, "indirect CRL"},
		{"unknown critical", []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 99999, 1}, Critical: true, Value: []byte{5, 0}}}, nil, "critical extension 1.3.6.1.4.1.99999.1"},
		{"entry of another issuer", nil, []pkix.Extension{{Id: oidCertIssuer, Critical: true, Value: issuerNames}}, "critical extension 2.5.29.29"},
		{"unknown non-critical", []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 99999, 2}, Value: []byte{5, 0}}}, nil, ""},
		{"named distribution point", []pkix.Extension{{Id: oidIssuingDistribution, Critical: true, Value: named}}, nil, ""},
		{"partitioned", []pkix.Extension{{Id: oidIssuingDistribution, Critical: true, Value: partition}}, nil, ""},
	}
	for _, tc := range cases {
		path := filepath.Join(t.TempDir(), "ca.crl")
		if err := os.WriteFile(path, crlWith(t, ca, serial, tc.ext, tc.entryExt), 0o600); err != nil {
			t.Fatal(err)
		}
		rl, err := LoadRevocationsFrom(path, []*x509.Certificate{ca.cert})
		switch {
		case tc.want == "" && (err != nil || !rl.Revoked(serial)):
			t.Errorf("%s CRL: %v, revoked %v; want it used", tc.name, err, rl.Revoked(serial))
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s CRL: err = %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}
