package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
)

// ALPN is the application protocol edgereg speaks over QUIC.
const ALPN = "edgereg/1"

// ServerConfig returns a TLS 1.3 server config for a node. Clients must
// present a certificate signed by clientCAs; with allowAnonymous, clients
// without a certificate are let in too (they have no Identity) but a
// certificate that is presented must still verify.
func ServerConfig(cert tls.Certificate, clientCAs *x509.CertPool, allowAnonymous bool) *tls.Config {
	auth := tls.RequireAndVerifyClientCert
	if allowAnonymous {
		auth = tls.VerifyClientCertIfGiven
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    clientCAs,
		ClientAuth:   auth,
		NextProtos:   []string{ALPN},
	}
}

// ClientConfig returns a TLS 1.3 client config that trusts only roots and
// presents cert (nil for an anonymous client). It never skips verification.
// A session cache lets reconnects resume without a full handshake.
//
// serverName is the name the node's certificate must carry. A "host:port" is
// reduced to host. An IP address is checked against the certificate's IP
// SANs (EnsureLocal puts 127.0.0.1, ::1 and every IP given in hosts there).
// Empty means "localhost", which every node certificate made by EnsureLocal
// carries: the peer is then trusted for being any node of this CA, which
// is what a single-CA deployment dialling by bare address wants.
func ClientConfig(cert *tls.Certificate, roots *x509.CertPool, serverName string) *tls.Config {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS13,
		RootCAs:            roots,
		ServerName:         normalizeServerName(serverName),
		NextProtos:         []string{ALPN},
		ClientSessionCache: tls.NewLRUClientSessionCache(64),
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg
}

// KeyExchange names the key exchanges a node's handshakes may use.
type KeyExchange string

const (
	// KeyExchangeHybrid, the default, is Go's choice: the post-quantum
	// hybrid X25519MLKEM768 when the client offers it (every Go client
	// does), else X25519 or a NIST curve. Session keys then stay secret
	// even from a future quantum computer that recorded the handshake.
	KeyExchangeHybrid KeyExchange = "hybrid"
	// KeyExchangeX25519 accepts X25519 alone: about a sixth of a node's
	// CPU per handshake less (ML-KEM encapsulation, and the client's
	// decapsulation), and no protection of recorded sessions against a
	// future quantum computer. An explicit choice, never the default.
	KeyExchangeX25519 KeyExchange = "x25519"
)

// ParseKeyExchange returns the KeyExchange named s ("" is the default).
func ParseKeyExchange(s string) (KeyExchange, error) {
	switch k := KeyExchange(strings.ToLower(strings.TrimSpace(s))); k {
	case "", KeyExchangeHybrid:
		return KeyExchangeHybrid, nil
	case KeyExchangeX25519:
		return k, nil
	}
	return "", fmt.Errorf("key exchange %q: use hybrid or x25519", s)
}

// curves is tls.Config.CurvePreferences for k: nil (Go's default, with
// the hybrid first) unless X25519 alone is asked for.
func (k KeyExchange) curves() []tls.CurveID {
	if k == KeyExchangeX25519 {
		return []tls.CurveID{tls.X25519}
	}
	return nil
}

func normalizeServerName(s string) string {
	s = strings.TrimSpace(s)
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if s == "" {
		return "localhost"
	}
	return s
}
