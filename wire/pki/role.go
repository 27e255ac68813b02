package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Role is what a certificate's holder is allowed to be in edgereg.
type Role string

// The roles a certificate can carry.
const (
	// RoleBroker is a broker that registers its routes.
	RoleBroker Role = "broker"
	// RoleClient is a producer or consumer that reads routes.
	RoleClient Role = "client"
	// RoleOperator is an administrator (the CLI).
	RoleOperator Role = "operator"
	// RoleNode is an edgereg node; node certificates serve TLS and may also
	// act as clients towards other nodes.
	RoleNode Role = "node"
)

// Sentinel errors callers can test with errors.Is.
var (
	// ErrNoRole means a certificate carries no role SAN, or more than one.
	ErrNoRole = errors.New("certificate carries no single edgereg role")
	// ErrNoPeerCert means the peer presented no verified certificate
	// (an anonymous client on a server that allows them).
	ErrNoPeerCert = errors.New("no verified peer certificate")
)

// URI SAN layout: edgereg://role/<role> and edgereg://broker-group/<name>.
const (
	uriScheme    = "edgereg"
	uriRoleHost  = "role"
	uriGroupHost = "broker-group"
)

// ParseRole parses a role name such as "broker" (case-insensitive).
func ParseRole(s string) (Role, error) {
	r := Role(strings.ToLower(strings.TrimSpace(s)))
	if !r.valid() {
		return "", fmt.Errorf("unknown role %q (want broker, client, operator or node)", s)
	}
	return r, nil
}

func (r Role) valid() bool {
	switch r {
	case RoleBroker, RoleClient, RoleOperator, RoleNode:
		return true
	}
	return false
}

// roleURI returns the URI SAN that encodes role.
func roleURI(r Role) *url.URL {
	return &url.URL{Scheme: uriScheme, Host: uriRoleHost, Path: "/" + string(r)}
}

// groupURI returns the URI SAN that allows registering broker group name.
func groupURI(name string) *url.URL {
	return &url.URL{Scheme: uriScheme, Host: uriGroupHost, Path: "/" + name}
}

// Identity is who a verified certificate says its holder is.
type Identity struct {
	// Role is the single role the certificate carries.
	Role Role
	// Name is the certificate's subject CommonName.
	Name string
	// BrokerGroups are the broker groups a broker may register; empty means any.
	BrokerGroups []string
}

// IdentityFromCert reads the role and broker groups from cert's URI SANs.
// It does not verify the certificate; pass only verified certificates.
func IdentityFromCert(cert *x509.Certificate) (Identity, error) {
	if cert == nil {
		return Identity{}, ErrNoPeerCert
	}
	id := Identity{Name: cert.Subject.CommonName}
	roles := 0
	for _, u := range cert.URIs {
		if u.Scheme != uriScheme {
			continue
		}
		value := strings.TrimPrefix(u.Path, "/")
		// An edgereg URI is one of the two forms below or the certificate
		// is refused: skipping a broker-group SAN spelt otherwise (a port,
		// a typo, an opaque URI) would leave a certificate meant for one
		// group allowed every group. Hosts are case-insensitive (RFC 3986).
		// User info, a query or a fragment make another form too: what a
		// CA meant by them is not known, so they are refused, not dropped.
		host := strings.ToLower(u.Host)
		if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != "" {
			host = ""
		}
		switch host {
		case uriRoleHost:
			r, err := ParseRole(value)
			if err != nil {
				return Identity{}, fmt.Errorf("certificate %q: %w", id.Name, err)
			}
			id.Role = r
			roles++
		case uriGroupHost:
			if value == "" {
				return Identity{}, fmt.Errorf("certificate %q: empty broker group SAN", id.Name)
			}
			id.BrokerGroups = append(id.BrokerGroups, value)
		default:
			return Identity{}, fmt.Errorf("certificate %q: URI SAN %q is neither %s://%s/<role> nor %s://%s/<group>",
				id.Name, u.String(), uriScheme, uriRoleHost, uriScheme, uriGroupHost)
		}
	}
	if roles != 1 {
		return Identity{}, fmt.Errorf("certificate %q has %d role SANs: %w", id.Name, roles, ErrNoRole)
	}
	return id, nil
}

// IdentityFromConnState returns the identity of the peer of a completed
// handshake. It uses only the verified chain, never unverified certificates,
// and returns ErrNoPeerCert for an anonymous peer.
func IdentityFromConnState(cs tls.ConnectionState) (Identity, error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return Identity{}, ErrNoPeerCert
	}
	return IdentityFromCert(cs.VerifiedChains[0][0])
}

// MayRegisterGroup reports whether id may register broker group name: only
// brokers may, and a broker whose certificate lists groups only those.
func (id Identity) MayRegisterGroup(name string) bool {
	if id.Role != RoleBroker || name == "" {
		return false
	}
	return len(id.BrokerGroups) == 0 || slices.Contains(id.BrokerGroups, name)
}
