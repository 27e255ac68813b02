package gateway_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/pki"
)

// logBuffer is a logger's output, written by the gateway's goroutines while
// the test reads it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestNodeThatDoesNotAnswerIsLogged: a gateway whose credential every node
// refused (another CA's), or whose WAN was cut, logged "listening" and
// nothing more: only /healthz said that no node answered, and a log line
// came only once a client asked for a topic not cached. A node that stops
// answering the gateway's probes is logged with the reason, once, and
// again when it answers.
func TestNodeThatDoesNotAnswerIsLogged(t *testing.T) {
	var logs logBuffer
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
