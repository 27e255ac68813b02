// Package pki gives edgereg zero-configuration mutual TLS on one machine and
// issues credentials for other machines.
//
// # Data directory layout
//
// EnsureLocal keeps a small certificate authority under DIR/tls (mode 0700):
//
//	DIR/tls/ca.crt        self-signed CA (ECDSA P-256, 10 years); copy it to other machines
//	DIR/tls/ca.key        CA private key (0600); it never needs to leave this machine
//	DIR/tls/node.crt      this node's certificate, role node, server and client auth (1 year)
//	DIR/tls/node.key      its key (0600)
//	DIR/tls/operator.crt  client certificate for the CLI on this machine, role operator,
//	DIR/tls/operator.key  CN "local-operator" (1 year); read by LocalOperator
//
// All files are written atomically (temporary file, fsync, rename, fsync of
// the directory; a directory created for them is synced into its parent), so
// a crash never leaves a half-written key behind, nor loses the tls
// directory of a node that has just started. The CA is
// created once; the node certificate is re-issued whenever it is missing,
// damaged, within 30 days of expiry (RenewBefore), or does not cover a
// requested host, and the operator certificate when it is missing, damaged,
// no longer valid or within 30 days of expiry; Local.Issued says which was
// and why. A running node calls EnsureLocal again once its certificate or
// the operator's comes within RenewBefore of expiry. A
// certificate "not valid yet" means the clock is behind, not that the
// certificate is bad: it is kept, and nothing is issued while the clock
// reads earlier than the CA's creation.
// InitCA creates a CA explicitly (and refuses where one exists); OpenLocal
// loads one for issuing and never creates it, so a mistyped data directory
// cannot yield credentials nobody trusts. WriteCredential refuses to
// replace existing files unless forced.
//
// # Reloading
//
// A node serves its credentials through a Reloader: certificate, key,
// client CA bundle and revocation list (a list of leaf serials, or X.509
// CRLs, each signed by a client CA and revoking that CA's certificates,
// leaves and intermediates alike; see RevocationList) are read again when a
// file changes, and a change that cannot be used keeps the last good
// credentials.
//
// # Roles
//
// Every certificate issued here carries exactly one role as a URI SAN
// edgereg://role/<role>, where role is broker, client, operator or node. A
// certificate with no role SAN, or more than one, has no identity (ErrNoRole).
// A broker certificate may also list the broker groups it may register as
// URI SANs edgereg://broker-group/<name>; a broker certificate that lists no
// group may register any group (see Identity.MayRegisterGroup). The node uses
// the Identity from IdentityFromConnState to decide what each peer may do.
package pki
