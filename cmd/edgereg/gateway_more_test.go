package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/remoting"
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

// startGatewayCmd runs `edgereg gateway` with args after the node's
// credentials and waits until its remoting listener accepts connections.
func startGatewayCmd(t *testing.T, args ...string) (listen string, stderr *bytes.Buffer) {
	t.Helper()
	addr, dir := cliNode(t)
	listen, err := freeTCPAddr()
	if err != nil {
		t.Fatal(err)
	}
	stderr = &bytes.Buffer{}
	gw := exec.Command(binary, append([]string{"gateway", "--nodes", addr, "--data", dir, "--listen", listen,
		"--admin-addr", "off", "--log-format", "text"}, args...)...)
	gw.Stderr = stderr
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- gw.Wait() }()
	t.Cleanup(func() {
		gw.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			gw.Process.Kill()
			<-exited
		}
	})
	waitGateway(t, "the gateway's remoting listener", func() bool {
		c, err := net.Dial("tcp", listen)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return listen, stderr
}

// TestGatewayLoopbackServesMoreThanAHostShare: on its default loopback
// address every broker and client of the machine connects from 127.0.0.1,
// so a per-source-IP share (64 connections, half the workers) is a cap on
// the whole machine, not a fair share between hosts. The 65th local client
// must be served.
func TestGatewayLoopbackServesMoreThanAHostShare(t *testing.T) {
	listen, stderr := startGatewayCmd(t)
	const conns = remoting.DefaultMaxConnsPerHost + 8
	for i := range conns {
		nc, err := net.Dial("tcp", listen)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		frame, err := remoting.NewRequest(9999, int32(i+1), nil, nil).Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(frame); err != nil {
			t.Fatalf("connection %d of %d: %v", i+1, conns, err)
		}
		nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := remoting.ReadCommand(nc, 0); err != nil {
			t.Fatalf("local connection %d of %d not served: %v\n%s", i+1, conns, err, stderr.String())
		}
	}
}
