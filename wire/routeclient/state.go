package routeclient

import (
	"errors"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
)

// ErrRefused is matched by errors of a node that refused this client for
// good: the TLS handshake failed (a certificate from another CA, an expired
// or revoked one, no common ALPN), the node found no usable identity in the
// client certificate, or it said "not authorized". Retrying unchanged does
// not help; fix the credentials or the configuration.
var ErrRefused = errors.New("refused by the node")

// ConnState is the state of the client's connection to one node.
type ConnState int

// Connection states, as Config.OnConnState reports them.
const (
	// StateConnected: the node answered (a dial or a request succeeded).
	StateConnected ConnState = iota + 1
	// StateFailed: the node could not be reached or stopped answering;
	// the client tries it again later.
	StateFailed
	// StateRefused: the node refused this client (ErrRefused). The client
	// keeps using the other nodes; a watch that every node refuses ends
	// with the error.
	StateRefused
)

// String returns the state's name, as logs show it.
func (s ConnState) String() string {
	switch s {
	case StateConnected:
		return "connected"
	case StateFailed:
		return "failed"
	case StateRefused:
		return "refused"
	}
	return "unknown"
}

// ConnEvent is a change of the connection state to one node.
type ConnEvent struct {
	Node  string
	State ConnState
	// Err is why the state is StateFailed or StateRefused.
	Err error
	At  time.Time
}

// appCodeNoIdentity is the node's CONNECTION_CLOSE code for a client
// certificate without a usable identity (PROTOCOL.md 1.2).
const appCodeNoIdentity = 0x11

// permanent reports whether err is a refusal that retrying cannot fix.
func permanent(err error) bool {
	if errors.Is(err, ErrRefused) {
		return true
	}
	var te *quic.TransportError
	if errors.As(err, &te) && te.ErrorCode.IsCryptoError() {
		return true
	}
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote && ae.ErrorCode == appCodeNoIdentity {
		return true
	}
	var we *wire.Error
	return errors.As(err, &we) && we.Code == wire.CodeNotAuthorized
}

// setState records the connection state of n and tells Config.OnConnState
// when it changed. Called without locks held.
func (n *node) setState(s ConnState, err error) {
	n.health.Lock()
	changed := n.state != s
	n.state = s
	n.health.Unlock()
	if changed && n.c.cfg.OnConnState != nil {
		n.c.cfg.OnConnState(ConnEvent{Node: n.addr, State: s, Err: err, At: time.Now()})
	}
}

// report sets the state an outcome of a dial or a request stands for.
func (n *node) report(err error) {
	switch {
	case err == nil:
		n.setState(StateConnected, nil)
	case permanent(err):
		n.setState(StateRefused, err)
	default:
		n.setState(StateFailed, err)
	}
}
