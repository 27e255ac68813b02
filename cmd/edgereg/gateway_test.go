package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/remoting"
)

// TestGatewayCommand runs `edgereg gateway` in front of a node: a 5.x
// broker's registration through it reaches the node (the CLI's route
// command sees it over QUIC), a route read through it is answered, its
// health is served, and SIGTERM stops it cleanly.
func TestGatewayCommand(t *testing.T) {
	addr, dir := cliNode(t)
	listen, err := freeTCPAddr()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := freeTCPAddr()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	gw := exec.Command(binary, "gateway", "--nodes", addr, "--data", dir, "--listen", listen,
		"--admin-addr", admin, "--log-format", "json", "--log-level", "warn")
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
	waitGateway(t, "the gateway's health", func() bool {
		resp, err := http.Get("http://" + admin + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	// /healthz and /metrics name every broker and node: on loopback, as
	// the node's status page, they answer only requests addressed to an
	// IP or localhost, so a web page cannot read them through DNS
	// rebinding from a browser on the gateway's host.
	_, port, _ := net.SplitHostPort(admin)
	for _, path := range []string{"/healthz", "/metrics"} {
		for host, want := range map[string]int{"rebind.example:" + port: http.StatusForbidden, "localhost:" + port: http.StatusOK} {
			req, err := http.NewRequest("GET", "http://"+admin+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s with Host %s = %d, want %d", path, host, resp.StatusCode, want)
			}
		}
	}

	b, err := os.ReadFile("../../testdata/rocketmq/v5_register_broker_request.hex")
	if err != nil {
		t.Fatal(err)
	}
	frame, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	call := func(frame []byte) *remoting.Command {
		t.Helper()
		if _, err := nc.Write(frame); err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := remoting.ReadCommand(nc, 0)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := call(frame); resp.Code != remoting.Success {
		t.Fatalf("REGISTER_BROKER through the gateway: %d %q", resp.Code, resp.Remark)
	}
	env := []string{"EDGEREG_NODES=" + addr, "EDGEREG_DATA=" + dir}
	waitGateway(t, "the broker on the node", func() bool {
		out, _, code := run(t, env, "route", "TopicTest", "-o", "json")
		var routes []routeOut
		return code == 0 && json.Unmarshal([]byte(out), &routes) == nil && len(routes) == 1 &&
			len(routes[0].BrokerGroups) == 1 && len(routes[0].BrokerGroups[0].Brokers) == 1 &&
			routes[0].BrokerGroups[0].Brokers[0].Addr == "127.0.0.1:10911"
	})
	req := remoting.NewRequest(remoting.GetRouteInfoByTopic, 2, map[string]string{"topic": "TopicTest"}, nil)
	route, err := req.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if resp := call(route); resp.Code != remoting.Success || !bytes.Contains(resp.Body, []byte(`"127.0.0.1:10911"`)) {
		t.Fatalf("route through the gateway: %d %q %s", resp.Code, resp.Remark, resp.Body)
	}

	// Every gateway metric the README names is on /metrics, once a
	// registration, a route read and a polled read went through.
	info, err := remoting.NewRequest(remoting.GetBrokerClusterInfo, 3, nil, nil).Encode()
	if err != nil {
		t.Fatal(err)
	}
	if resp := call(info); resp.Code != remoting.Success {
		t.Fatalf("cluster info through the gateway: %d %q", resp.Code, resp.Remark)
	}
	families, err := metricFamilies(t, "http://"+admin+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range readmeMetrics(t, true) {
		if !families[name] {
			t.Errorf("README names %s, which the gateway's /metrics does not have", name)
		}
	}

	gw.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("gateway exited with %v: %s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("gateway did not stop on SIGTERM: %s", stderr.String())
	}
	// A normal stop is not an error: nothing at ERROR (the log level is warn).
	if strings.Contains(stderr.String(), `"level":"ERROR"`) {
		t.Fatalf("a normal stop logged an error:\n%s", stderr.String())
	}
}

func TestGatewayCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"gateway", "--nodes-dns", "no-port"},
		{"gateway", "--nodes-dns", "a:1", "--nodes-srv", "_x._udp.example"},
		{"gateway", "extra-arg"},
	} {
		if _, stderr, code := run(t, nil, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage): %s", args, code, stderr)
		}
	}
}

// waitGateway polls cond until it holds, failing after a generous deadline.
func waitGateway(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
