package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// syncBuffer is a buffer the node's goroutines may log into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestColoredLogHasNoPeerTerminalEscapes: the colored text log (a node run
// on a terminal) turned every `\x1b` of a quoted value back into a raw ESC,
// so a broker name of printable characters that passes validation
// (`b \x1b[2J`, a literal backslash) reached the operator's terminal as a
// clear-screen sequence, and a KV key with a real ESC (KV keys may hold any
// byte) as an OSC sequence setting the window title. Peer strings are
// logged escaped, never as terminal controls.
func TestColoredLogHasNoPeerTerminalEscapes(t *testing.T) {
	for _, color := range []bool{true, false} {
		var out syncBuffer
		ca := nodetest.NewCA(t)
		tn := nodetest.Start(t, ca, func(c *node.Config) {
			c.Logger = slog.New(textHandler(&out, slog.LevelInfo, color))
		})
		ctx := nodetest.Context(t)
		op, err := client.Dial(ctx, tn.Addr(), client.Config{TLS: ca.TLS(t, pki.RoleOperator, "ops")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { op.Close() })
		reg := brokerReg(`b \x1b[2J`, "10.0.0.1:10911", "orders")
		reg.Cluster = `c \x1b[2J`
		if _, err := op.Register(ctx, reg); err != nil {
			t.Fatal(err)
		}
		if err := op.KVPut(ctx, "ns", "k \x1b]0;owned\x07", "v"); err != nil {
			t.Fatal(err)
		}
		if _, err := op.Register(ctx, &wire.Register{Cluster: "c", BrokerName: "b\x1b[2J", Addr: "10.0.0.2:10911"}); err == nil {
			t.Fatal("a broker name with a control character was accepted")
		}
		log := out.String()
		for _, injected := range []string{"\x1b[2J", "\x1b]0;"} {
			if strings.Contains(log, injected) {
				t.Errorf("color %v: the log carries the peer's raw terminal sequence %q:\n%q", color, injected, log)
			}
		}
		for _, want := range []string{`broker registered`, `kv put`, `[2J`, `]0;owned`} {
			if !strings.Contains(log, want) {
				t.Errorf("color %v: the log lacks %q:\n%q", color, want, log)
			}
		}
	}
}
