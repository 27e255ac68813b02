package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"log/slog"
	"net"
	"os"
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

// TestGatewayStopsWithTheWANCut: SIGTERM stops the gateway while no node
// is reachable, a broker's registrar keeps trying and a route read waits
// for the nodes (4 s) past --shutdown-timeout (2 s). The gateway stops;
// a stop past the timeout is the gateway's failure, exit 1 with a message
// that says so, as for `edgereg node`, not exit 4 ("no node answered") with
// "context deadline exceeded".
func TestGatewayStopsWithTheWANCut(t *testing.T) {
	_, dir := cliNode(t) // for the credentials; the gateway is sent elsewhere
	listen, err := freeTCPAddr()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	gw := exec.Command(binary, "gateway", "--nodes", "127.0.0.1:1", "--data", dir, "--listen", listen,
		"--admin-addr", "off", "--log-format", "text", "--shutdown-timeout", "2s")
	gw.Stderr = &stderr
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- gw.Wait() }()
	t.Cleanup(func() {
		if gw.ProcessState == nil {
			gw.Process.Kill()
			<-exited
		}
	})
	var nc net.Conn
	waitGateway(t, "the gateway's remoting listener", func() bool {
		nc, err = net.Dial("tcp", listen)
		return err == nil
	})
	defer nc.Close()
	b, err := os.ReadFile("../../testdata/rocketmq/v5_register_broker_request.hex")
	if err != nil {
		t.Fatal(err)
	}
	frame, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	if resp, err := remoting.ReadCommand(nc, 0); err != nil || resp.Code != remoting.SystemError {
		t.Fatalf("register with no node reachable: %+v %v\n%s", resp, err, stderr.String())
	}
	// A read of a topic not cached waits for the nodes.
	route, err := remoting.NewRequest(remoting.GetRouteInfoByTopic, 99, map[string]string{"topic": "NotCachedYet"}, nil).Encode()
	if err != nil {
		t.Fatal(err)
	}
	nc.Write(route)
	// A request answered locally, after it on the same connection: once
	// it is answered, the route read was read (frames are read in order)
	// and is waiting in its handler.
	probe, err := remoting.NewRequest(9999, 100, nil, nil).Encode()
	if err != nil {
		t.Fatal(err)
	}
	nc.Write(probe)
	for {
		resp, err := remoting.ReadCommand(nc, 0)
		if err != nil {
			t.Fatalf("waiting for the local answer: %v\n%s", err, stderr.String())
		}
		if resp.Opaque == 100 {
			break
		}
	}
	gw.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("gateway did not stop on SIGTERM:\n%s", stderr.String())
	}
	if code := gw.ProcessState.ExitCode(); code != exitFailure || !strings.Contains(stderr.String(), "--shutdown-timeout") {
		t.Errorf("a stop past --shutdown-timeout: exit %d, want %d with a message naming the timeout:\n%s", code, exitFailure, stderr.String())
	}
}

// TestGatewaySecondSignalCutsShutdownShort: a gateway stopping with a
// route read waiting for unreachable nodes waited for it whatever the
// operator did; a second Ctrl-C (or SIGTERM) did nothing. As a node's, the
// second signal ends the graceful stop at once: the gateway stops, says
// why, and exits 1, as a stop past its deadline does. The read holds the
// stop for --request-timeout (4 s), the most it may; --shutdown-timeout is
// an hour, so only the second signal can end the stop early.
func TestGatewaySecondSignalCutsShutdownShort(t *testing.T) {
	_, dir := cliNode(t) // for the credentials; the gateway is sent elsewhere
	listen, err := freeTCPAddr()
	if err != nil {
		t.Fatal(err)
	}
	gw := startProcess(t, "gateway", "--nodes", "127.0.0.1:1", "--data", dir, "--listen", listen,
		"--admin-addr", "off", "--log-format", "json", "--request-timeout", "4s", "--shutdown-timeout", "1h")
	var nc net.Conn
	waitGateway(t, "the gateway's remoting listener", func() bool {
		nc, err = net.Dial("tcp", listen)
		return err == nil
	})
	defer nc.Close()
	// A read of a topic not cached waits for the nodes; the request after
	// it, answered locally, tells the read is in its handler.
	route, err := remoting.NewRequest(remoting.GetRouteInfoByTopic, 99, map[string]string{"topic": "NotCachedYet"}, nil).Encode()
	if err != nil {
		t.Fatal(err)
	}
	probe, err := remoting.NewRequest(9999, 100, nil, nil).Encode()
	if err != nil {
		t.Fatal(err)
	}
	nc.Write(append(route, probe...))
	nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		resp, err := remoting.ReadCommand(nc, 0)
		if err != nil {
			t.Fatalf("waiting for the local answer: %v\n%s", err, gw.logs)
		}
		if resp.Opaque == 100 {
			break
		}
	}
	gw.cmd.Process.Signal(syscall.SIGINT)
	waitLog(t, gw, `"msg":"gateway shutting down"`)
	gw.cmd.Process.Signal(syscall.SIGINT)
	gw.waitEnd(t, 60*time.Second, "gateway did not stop")
	if code := gw.cmd.ProcessState.ExitCode(); code != exitFailure || !strings.Contains(gw.logs.String(), "second signal") {
		t.Errorf("gateway stopped by a second signal: exit %d (want %d) and logs naming the second signal:\n%s", code, exitFailure, gw.logs)
	}
}

// TestGatewayOneSignalStopsQuietly: the second-signal warning is for a
// second signal only; one stop of an idle gateway is graceful, exit 0.
func TestGatewayOneSignalStopsQuietly(t *testing.T) {
	_, dir := cliNode(t)
	listen, err := freeTCPAddr()
	if err != nil {
		t.Fatal(err)
	}
	gw := startProcess(t, "gateway", "--nodes", "127.0.0.1:1", "--data", dir, "--listen", listen,
		"--admin-addr", "off", "--log-format", "json")
	waitLog(t, gw, `"msg":"gateway listening for RocketMQ remoting"`)
	gw.cmd.Process.Signal(syscall.SIGTERM)
	gw.waitEnd(t, 60*time.Second, "gateway did not stop on SIGTERM")
	if gw.err != nil || strings.Contains(gw.logs.String(), "second signal") || !strings.Contains(gw.logs.String(), `"msg":"gateway stopped`) {
		t.Errorf("gateway stopped by one SIGTERM: %v, logs:\n%s\nwant exit 0, \"gateway stopped\" and no second-signal line", gw.err, gw.logs)
	}
}
