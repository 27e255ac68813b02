package gateway_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/pki"
)

// TestNodeThatDoesNotAnswerIsLogged: a gateway whose credential every node
// refused (another CA's), or whose WAN was cut, logged "listening" and
// nothing more: only /healthz said that no node answered, and a log line
// came only once a client asked for a topic not cached. A node that stops
// answering the gateway's probes is logged with the reason, once, and
// again when it answers.
func TestNodeThatDoesNotAnswerIsLogged(t *testing.T) {
	var logs nodetest.LogBuffer
	other := nodetest.NewCA(t) // not the nodes' CA
	s := startSite(t, 1, func(c *gateway.Config) {
		c.TLS = other.TLS(t, pki.RoleBroker, "gateway")
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	addr := s.nodes[0].Addr()
	nodetest.WaitFor(t, "a warning that the node does not answer", func() bool {
		return strings.Contains(logs.String(), "node="+addr)
	})
	line := logs.String()
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "certificate") {
		t.Errorf("the log says of the node that refused the gateway's credential:\n%s", line)
	}
}
