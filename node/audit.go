package node

import (
	"errors"
	"log/slog"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/ratelog"
)

// warnings are the node's rate-limited security logs, one rate for each
// kind (ratelog's: a burst, then one line a second).
type warnings struct {
	refused, tls, denied *ratelog.Logger
	// remoting is what remoting peers' requests make the node warn of
	// (node/remoting.go): they are not authenticated.
	remoting *ratelog.Logger
}

func newWarnings(log *slog.Logger) *warnings {
	return &warnings{refused: ratelog.New(log), tls: ratelog.New(log), denied: ratelog.New(log), remoting: ratelog.New(log)}
}

// peerAttrs names a peer in logs: role, certificate name, remote address.
func (p peer) attrs() []any {
	return []any{"peer_role", p.role(), "peer", p.Name, "remote", p.remote}
}

// connRefused counts and logs a refused connection. p is nil before the
// handshake, when only the address is known.
func (n *Node) connRefused(reason string, a *admitted, p *peer) {
	n.stats.refused.WithLabelValues(reason).Inc()
	args := []any{"reason", reason, "remote", a.remote}
	if p != nil {
		args = append(p.attrs()[:4], args...)
	}
	n.warn.refused.Warn("connection refused", args...)
}

// connReplaced counts a connection that a newer one with the same
// certificate took the slot of, or, anonymous, one with a certificate.
func (n *Node) connReplaced(v *admitted) {
	n.stats.replaced.Inc()
	by := "a newer one with the same certificate"
	if v.ident == "" {
		by = "a peer with a certificate (anonymous peers give way)"
	}
	n.log.Debug("connection replaced", "by", by, "remote", v.remote)
}

// handshakeFailed counts and logs a connection whose handshake did not
// complete; cause is why quic-go closed it.
func (n *Node) handshakeFailed(a *admitted, cause error) {
	if n.closing.Load() {
		return
	}
	reason := "other"
	var te *quic.TransportError
	var ae *quic.ApplicationError
	switch {
	case errors.As(cause, &ae) && ae.Remote, errors.As(cause, &te) && te.Remote && peerHungUp(te.ErrorCode):
		// The peer closed the connection on purpose before the node had
		// read its last flight: a client that only checks that the node
		// answers, or one that gave up. Nothing failed, so it is not
		// among the failures an operator alerts on, nor worth a warning.
		n.stats.tlsFailures.WithLabelValues("closed").Inc()
		n.log.Debug("peer closed during the handshake", "remote", a.remote, "err", errString(cause))
		return
	case errors.As(cause, &te) && te.ErrorCode.IsCryptoError():
		reason = "tls"
	case handshakeTimedOut(cause): // what admission counts as evidence of spoofing
		reason = "timeout"
	}
	n.stats.tlsFailures.WithLabelValues(reason).Inc()
	n.warn.tls.Warn("TLS handshake failed", "reason", reason, "remote", a.remote, "err", errString(cause))
}

// peerHungUp reports whether a peer's transport close is a deliberate
// one: an application's close sent before its 1-RTT keys (RFC 9000
// §10.2.3 turns it into APPLICATION_ERROR), or NO_ERROR.
func peerHungUp(code quic.TransportErrorCode) bool {
	return code == quic.ApplicationErrorErrorCode || code == quic.NoError
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// denied counts and logs a request refused as not authorized.
func (n *Node) denied(cs *connState, t wire.Type, err *wire.Error) {
	n.stats.denied.WithLabelValues(cs.peer.role(), t.String()).Inc()
	n.warn.denied.Warn("request denied", append(cs.peer.attrs(), "kind", t.String(), "err", err.Message)...)
}

// audit logs a change an operator made, with who made it.
func (n *Node) audit(cs *connState, msg string, args ...any) {
	n.log.Info(msg, append(args, cs.peer.attrs()...)...)
}
