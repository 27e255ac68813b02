package pki

import (
	"crypto/tls"
	"crypto/x509"
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
