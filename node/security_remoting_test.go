package node

import (
	"log/slog"
	"testing"

	"github.com/edgereg/edgereg/wire/remoting"
)

// TestRemotingIgnoredRegistrationsLogAtBoundedRate: remoting peers are not
// authenticated, so a peer that loops on a registration the registry
// ignores (an older state for a broker id held elsewhere) must not write
// a log line per request.
func TestRemotingIgnoredRegistrationsLogAtBoundedRate(t *testing.T) {
	var logs syncBuffer
	tn := startRemotingNode(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	c := dialRemoting(t, tn)
	newer := remoting.DataVersion{Counter: 1, StateVersion: 5, Timestamp: 1735689600000}
	if resp := c.call(registerCmd(t, 1, 0, "127.0.0.1:10911", newer, "a", "b")); resp.Code != remoting.Success {
		t.Fatalf("first registration: %+v", resp)
	}
	older := remoting.DataVersion{Counter: 1, StateVersion: 4, Timestamp: 1735689600000}
	const n = 200
	for i := range n {
		if resp := c.call(registerCmd(t, int32(2+i), 0, "127.0.0.1:20911", older, "a", "b")); resp.Code != remoting.Success {
			t.Fatalf("ignored registration %d: %+v, want SUCCESS as 5.x answers", i, resp)
		}
	}
	// A burst, then one a second: the loop above takes a few seconds on a
	// loaded machine, never the minutes n lines would need.
	if got := len(logs.lines("remoting registration ignored")); got == 0 || got >= n/2 {
		t.Fatalf("%d ignored registrations wrote %d log lines, want at least one and at most a burst and one a second", n, got)
	}
}
