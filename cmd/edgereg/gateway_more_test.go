package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/nodes"
)

// addrListener is a loopback listener that reports another address, so a
// test sees what the gateway does with an admin address beyond loopback
// without binding one.
type addrListener struct {
	net.Listener
	addr net.Addr
}

func (l addrListener) Addr() net.Addr { return l.addr }

// TestGatewayAdminBeyondLoopbackWarns: /healthz and /metrics name every
// broker and node and have no authentication; on loopback they are guarded
// against DNS rebinding, beyond it anyone who reaches the address reads
// them. The remoting listener warns when it leaves loopback; so must the
// admin address.
func TestGatewayAdminBeyondLoopbackWarns(t *testing.T) {
	gw, err := gateway.New(gateway.Config{Nodes: nodes.Static("127.0.0.1:1"), TLS: &tls.Config{},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	for _, tc := range []struct {
		ip   string
		warn bool
	}{{"10.7.0.5", true}, {"0.0.0.0", true}, {"127.0.0.1", false}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, nil))
		srv := serveGatewayAdmin(addrListener{ln, &net.TCPAddr{IP: net.ParseIP(tc.ip), Port: 9878}}, gw, logger)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		srv.Shutdown(ctx)
		cancel()
		warned := strings.Contains(buf.String(), "level=WARN")
		if warned != tc.warn {
			t.Errorf("admin address %s: warned %v, want %v; log:\n%s", tc.ip, warned, tc.warn, buf.String())
		}
	}
}
