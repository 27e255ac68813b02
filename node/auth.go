package node

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// Who may send what. Operators may send everything; the table lists the
// other roles. Brokers are further limited to the broker groups their
// certificate names (checked where the group is known, in dispatch).
var (
	queryTypes = []wire.Type{
		wire.TypeGetRoutes, wire.TypeClusterInfo, wire.TypeTopics, wire.TypeBrokerMemberGroup,
		wire.TypeWatch, wire.TypeUnwatch, wire.TypePing,
	}
	brokerTypes = []wire.Type{
		wire.TypeRegister, wire.TypeUpdateTopics, wire.TypeHeartbeat, wire.TypeUnregister,
	}
	anonymousTypes = []wire.Type{wire.TypeGetRoutes, wire.TypeWatch, wire.TypeUnwatch, wire.TypePing}

	allowed = map[string]map[wire.Type]bool{
		string(pki.RoleBroker): setOf(append(brokerTypes, queryTypes...)),
		string(pki.RoleClient): setOf(queryTypes),
		string(pki.RoleNode):   setOf(queryTypes),
		"anonymous":            setOf(anonymousTypes),
	}
)

func setOf(ts []wire.Type) map[wire.Type]bool {
	m := make(map[wire.Type]bool, len(ts))
	for _, t := range ts {
		m[t] = true
	}
	return m
}

// authorize refuses a request the peer's role may not send, naming both.
func authorize(p peer, t wire.Type) *wire.Error {
	if !p.anonymous && p.Role == pki.RoleOperator {
		return nil
	}
	if allowed[p.role()][t] {
		return nil
	}
	return wire.Errorf(wire.CodeNotAuthorized, "not authorized: role %s may not send %s", p.role(), t)
}

// authorizeGroup refuses a broker acting for a group its certificate does
// not name.
func authorizeGroup(p peer, group string) *wire.Error {
	if p.anonymous || p.Role != pki.RoleBroker || p.MayRegisterGroup(group) {
		return nil
	}
	return wire.Errorf(wire.CodeNotAuthorized, "not authorized: broker certificate %q may not act for broker group %q", p.Name, group)
}

// authorizeRegister refuses a registration for a group the broker's
// certificate does not name, and arranges that the registry refuses it too
// when the address holds a lease in another group the certificate does not
// name: taking an address out of a group is acting for that group.
func authorizeRegister(p peer, reg *registry.Registration) *wire.Error {
	if err := authorizeGroup(p, reg.BrokerName); err != nil {
		return err
	}
	reg.MayMove = func(from string) error {
		if err := authorizeGroup(p, from); err != nil {
			return wire.Errorf(wire.CodeNotAuthorized, "not authorized: %s holds a lease in broker group %q: %s", reg.Addr, from, err.Message)
		}
		return nil
	}
	return nil
}

// Who may stay connected. A handshake checks a certificate once; the
// node re-reads its credentials every second (pki.Reloader) and then
// checks every connection again, so that revoking a certificate, or taking
// its CA out of the client CA bundle, ends the connections it holds (QUIC
// keep-alives would hold them for ever), and ends a connection whose
// certificate expires, which its next handshake would not pass either.

// Reasons a connection is closed for its certificate, as
// edgereg_connections_closed_untrusted_total labels them.
const (
	untrustedRevoked = "revoked"   // on the revocation list
	untrustedCA      = "untrusted" // no longer verifies against the client CAs
	untrustedExpired = "expired"   // a certificate of its chain expired
)

// connTrust is what the trust loop knows of a connection.
type connTrust struct {
	p        peer
	certs    []*x509.Certificate // the peer's, as sent: leaf first
	notAfter time.Time           // when the last of its verified chains expires (pki.LastExpiry of those rooted in the client CAs in use)
}

func (n *Node) trustOf(qc *quic.Conn, p peer) *connTrust {
	tls := qc.ConnectionState().TLS
	return &connTrust{p: p, certs: tls.PeerCertificates, notAfter: pki.LastExpiry(n.creds.Rooted(tls.VerifiedChains))}
}

// credsGenKey holds, in a connection's context, the credentials'
// Generation when its handshake began.
type credsGenKey struct{}

// connContext is quic.Transport.ConnContext: admission, and the
// credentials' generation before the handshake, for checkTaken.
func (n *Node) connContext(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	ctx, err := n.adm.admit(ctx, info)
	if err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, credsGenKey{}, n.creds.Generation()), nil
}

// checkTaken checks a connection just recorded for the trust loop again if
// the credentials were reloaded since its handshake began: the loop's
// check of every connection after that reload may have run before the
// connection was recorded (its handshake verified against the old ones),
// and the loop checks again only at the next reload. Recorded first, read
// after: a reload this misses comes before the loop's next look at every
// connection, which then sees it.
func (n *Node) checkTaken(qc *quic.Conn, ct *connTrust) bool {
	g0, ok := qc.Context().Value(credsGenKey{}).(uint64)
	if !ok || len(ct.certs) == 0 || n.creds.Generation() == g0 {
		return true
	}
	if err := n.creds.Recheck(ct.certs, time.Now()); err != nil {
		n.closeUntrusted(qc, ct.p, err)
		return false
	}
	return true
}

func newUntrustedCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgereg_connections_closed_untrusted_total",
		Help: "Established connections closed because their certificate stopped being valid, by reason: revoked, untrusted (its CA was taken out of the client CAs), expired."},
		[]string{"reason"})
	for _, r := range []string{untrustedRevoked, untrustedCA, untrustedExpired} {
		c.WithLabelValues(r)
	}
	return c
}

// trustLoop re-reads the credentials every second, renewing the local
// CA's first when they are about to expire (localRenewal); after a reload it
// checks every connection's certificates again (a signature check each:
// some 100 µs, so a second of CPU for 10,000 connections, once per
// change), and every second it closes those whose certificate expired
// (a comparison each).
func (n *Node) trustLoop() {
	seen := n.creds.Generation()
	var warned *pki.RevocationList // the list last warned of as stale
	n.every(pki.DefaultCheckEvery, func() {
		if n.renewal != nil {
			n.renewal.check(time.Now()) // before Current, which takes what it wrote
		}
		n.creds.Current() // reloads when a file changed
		gen := n.creds.Generation()
		n.checkConns(gen != seen)
		if gen != seen {
			n.rechecks.Add(1)
		}
		seen = gen
		warned = n.warnStaleCRLs(warned)
	})
}

// warnStaleCRLs logs, once per revocation list, that CRLs of it are past
// their NextUpdate: they are still applied, but what their CA revoked
// since is let in, so the operator must renew them (the node does not
// fetch CRLs). It returns the list warned of, or warned.
func (n *Node) warnStaleCRLs(warned *pki.RevocationList) *pki.RevocationList {
	rl := n.creds.Revocations()
	if rl == nil || rl == warned {
		return warned
	}
	stale := rl.Stale(time.Now())
	if len(stale) == 0 {
		return warned
	}
	n.log.Warn("revocation list: CRL past its NextUpdate, still applied; renew it (certificates its CA revoked since are let in)",
		"file", n.cfg.RevocationFile, "ca", strings.Join(stale, "; "), "next_update", rl.NextUpdate().UTC().Format(time.RFC3339))
	return rl
}

// revocationGauges are the metrics of the CRLs in use: the earliest
// NextUpdate (0 for none), so an alert can fire before it passes, and how
// many are past it.
func (n *Node) revocationGauges() []prometheus.Collector {
	rl := func() *pki.RevocationList {
		if n.creds == nil {
			return nil
		}
		return n.creds.Revocations()
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edgereg_revocation_next_update_timestamp_seconds",
			Help: "The earliest NextUpdate of the CRLs in use, as a Unix time; 0 when none names one."},
			func() float64 {
				if t := rl().NextUpdate(); !t.IsZero() {
					return float64(t.Unix())
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edgereg_revocation_stale_crls",
			Help: "CRLs in use past their NextUpdate: still applied, but certificates revoked since are let in until they are renewed."},
			func() float64 { return float64(len(rl().Stale(time.Now()))) }),
	}
}

// checkConns closes the connections whose certificate is no longer valid:
// by expiry alone, or, with full, by everything a handshake checks.
func (n *Node) checkConns(full bool) {
	now := time.Now()
	n.conns.Range(func(k, v any) bool {
		ct, ok := v.(*connTrust)
		if !ok || len(ct.certs) == 0 {
			return true // not identified yet, or anonymous
		}
		var err error
		switch {
		case full:
			// What the handshake verified may have changed: a chain may
			// no longer count (its CA taken out, or revoked).
			var until time.Time
			if until, err = n.creds.ValidUntil(ct.certs, now); err == nil {
				ct.notAfter = until
			}
		case now.After(ct.notAfter):
			err = fmt.Errorf("%w: %q at %s", pki.ErrExpired, ct.p.Name, ct.notAfter.UTC().Format(time.RFC3339))
		}
		if err != nil {
			n.closeUntrusted(k.(*quic.Conn), ct.p, err)
		}
		return true
	})
}

func (n *Node) closeUntrusted(qc *quic.Conn, p peer, err error) {
	reason := untrustedCA
	switch {
	case errors.Is(err, pki.ErrRevoked):
		reason = untrustedRevoked
	case errors.Is(err, pki.ErrExpired):
		reason = untrustedExpired
	}
	n.untrusted.WithLabelValues(reason).Inc()
	n.warn.refused.Warn("connection closed: its certificate is no longer valid", append(p.attrs(), "reason", reason, "err", err.Error())...)
	qc.CloseWithError(codeNoIdentity, err.Error())
}
