package node

import (
	"testing"
	"time"

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
	const probes = 20
	for range probes {
		tn.dial(pki.RoleClient).Close()
	}
	// The node still serves, and by then it has seen every probe end.
	if _, err := tn.dial(pki.RoleClient).Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && tn.stats.conns.Load() > 1 {
		time.Sleep(10 * time.Millisecond)
	}
	if ls := logs.lines("TLS handshake failed"); len(ls) > 0 {
		t.Errorf("%d probes that connected and closed were logged as failed handshakes: %q", probes, ls)
	}
	for _, reason := range []string{"other", "tls", "timeout"} {
		if n := metricValue(t, tn, "edgereg_tls_handshake_failures_total", "reason="+reason); n != 0 {
			t.Errorf("%v of %d probes counted as handshake failures with reason %s", n, probes, reason)
		}
	}
}
