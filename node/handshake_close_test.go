package node

import (
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire/pki"
)

// TestPeerClosingAtHandshakeIsNotAFailure: a client that connects and
// closes at once (a probe that only checks the node answers, a client
// giving up) closes before the node has read its handshake's last
// flight. The node logged each as a warning, "TLS handshake failed"
// with reason other, and counted it with the failures an operator
// alerts on, while nothing failed: the peer went away. Such a close is
// counted under reason closed, and logged at debug level only.
func TestPeerClosingAtHandshakeIsNotAFailure(t *testing.T) {
	logs := &syncBuffer{}
	tn := startNode(t, logTo(logs))
	const probes = 10
	for range probes {
		tn.dial(pki.RoleClient).Close()
	}
	// One that hangs up before its handshake is done: its close travels
	// in a handshake packet, as a transport close with the code
	// APPLICATION_ERROR (RFC 9000 §10.2.3). A probe above that the node
	// reads before its last flight arrives the same way.
	for range probes {
		qc, err := quic.DialAddrEarly(ctxT(t), tn.Addr().String(), tn.tlsFor(pki.RoleClient, "probe"), nil)
		if err != nil {
			t.Fatal(err)
		}
		qc.CloseWithError(0, "probe done")
	}
	// The node still serves; then every probe's end has been counted:
	// only this connection is left admitted.
	if _, err := tn.dial(pki.RoleClient).Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every probe's connection to end", func() bool {
		tn.adm.mu.Lock()
		defer tn.adm.mu.Unlock()
		return tn.adm.total == 1
	})
	// Some probes closed before the node had their last flight: the
	// checks below are about them, not vacuous.
	if n := metricValue(t, tn, "edgereg_tls_handshake_failures_total", "reason=closed"); n == 0 {
		t.Error("no probe was counted as closed during its handshake")
	}
	if ls := logs.lines("TLS handshake failed"); len(ls) > 0 {
		t.Errorf("%d probes that connected and closed, twice over, were logged as failed handshakes: %q", probes, ls)
	}
	for _, reason := range []string{"other", "tls", "timeout"} {
		if n := metricValue(t, tn, "edgereg_tls_handshake_failures_total", "reason="+reason); n != 0 {
			t.Errorf("%v of 2x%d probes counted as handshake failures with reason %s", n, probes, reason)
		}
	}
}
