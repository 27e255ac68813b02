package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

var binary string

// TestMain builds the edgereg binary once, so the tests run it as a user
// would.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "edgereg-cli")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "edgereg")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build edgereg:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run executes the binary with args and the environment given as
// KEY=VALUE pairs; it returns stdout, stderr and the exit code.
func run(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	// Only against a hang, and longer than any --timeout a test gives a
	// command: 30 s killed TestRouteShowsAnEmptyRoute's push of a 2 MB
	// module (--timeout 2m) under -race on a loaded machine (exit -1).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// testPolicyCallTimeout replaces the 20 ms default in the CLI tests
// nodes: a policy module's dry run at push took longer under -race on a
// loaded machine, and the push was refused ("policy call exceeded its
// deadline"), failing TestCLIStatusShowsDrift now and then.
const testPolicyCallTimeout = 2 * time.Second

// cliNode starts an in-process node whose data directory the CLI uses.
func cliNode(t *testing.T) (addr, dir string) {
	t.Helper()
	dir = t.TempDir()
	addr, _ = cliNodeIn(t, dir)
	return addr, dir
}

// cliNodeIn starts a node on dir, stopped by stop or when the test ends,
// so a test can start another on the same directory.
func cliNodeIn(t *testing.T, dir string) (addr string, stop func()) {
	t.Helper()
	n, err := node.New(node.Config{Addr: "127.0.0.1:0", AdminAddr: node.AdminOff, DataDir: dir, WarmUp: -1,
		PolicyCallTimeout: testPolicyCallTimeout, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	go n.Serve()
	stop = sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	t.Cleanup(stop)
	return n.Addr().String(), stop
}

func registerBroker(t *testing.T, addr, dir string, reg *wire.Register) {
	t.Helper()
	cert, pool, err := pki.LocalOperator(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Config{TLS: pki.ClientConfig(&cert, pool, "")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Register(ctx, reg); err != nil {
		t.Fatal(err)
	}
}

func TestCLIQueriesAndAdmin(t *testing.T) {
	addr, dir := cliNode(t)
	registerBroker(t, addr, dir, &wire.Register{Cluster: "DefaultCluster", BrokerName: "broker-a", Addr: "10.0.0.1:10911",
		Zone: "z1", DataVersion: wire.DataVersion{Counter: 1},
		Topics: []wire.TopicConfig{{Name: "orders", ReadQueues: 4, WriteQueues: 4, Perm: 6}}})
	env := []string{"EDGEREG_NODES=" + addr, "EDGEREG_DATA=" + dir}

	out, stderr, code := run(t, env, "route", "orders", "-o", "json")
	if code != 0 {
		t.Fatalf("route: exit %d: %s", code, stderr)
	}
	var routes []routeOut
	if err := json.Unmarshal([]byte(out), &routes); err != nil {
		t.Fatalf("route -o json is not JSON: %v\n%s", err, out)
	}
	if len(routes) != 1 || routes[0].BrokerGroups[0].Brokers[0].Addr != "10.0.0.1:10911" || routes[0].Queues[0].WriteQueues != 4 {
		t.Fatalf("route = %+v", routes)
	}
	out, _, _ = run(t, env, "route", "orders")
	for _, want := range []string{"TOPIC", "orders", "broker-a", "rw-", "10.0.0.1:10911", "z1"} {
		if !strings.Contains(out, want) {
			t.Errorf("route table lacks %q:\n%s", want, out)
		}
	}

	steps := []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{[]string{"clusters"}, 0, "DefaultCluster"},
		{[]string{"topics"}, 0, "orders"},
		{[]string{"topics", "--cluster", "DefaultCluster"}, 0, "orders"},
		{[]string{"topics", "--kind", "system"}, 0, "broker-a"},
		{[]string{"topics", "--cluster", "nope"}, exitNotFound, ""},
		{[]string{"kv", "put", "ns", "k", "v1"}, 0, "ok"},
		{[]string{"kv", "get", "ns", "k"}, 0, "v1"},
		{[]string{"kv", "list", "ns"}, 0, "v1"},
		{[]string{"kv", "del", "ns", "k"}, 0, "ok"},
		{[]string{"kv", "get", "ns", "k"}, exitNotFound, ""},
		{[]string{"perm", "wipe", "broker-a"}, 0, "ok 1 topic changed"},
		{[]string{"route", "orders"}, 0, "r--"},
		{[]string{"perm", "add", "broker-a"}, 0, "ok 1 topic changed"},
		{[]string{"leases"}, 0, "10.0.0.1:10911"},
		{[]string{"topic", "delete", "orders"}, 0, "ok"},
		{[]string{"route", "orders", "--wait", "0"}, exitNotFound, ""},
		{[]string{"route"}, 2, ""},
		{[]string{"topics", "-o", "yaml"}, 2, ""},
		{[]string{"version"}, 0, "edgereg"},
	}
	for _, st := range steps {
		out, stderr, code := run(t, env, st.args...)
		if code != st.wantCode || !strings.Contains(out, st.wantOut) {
			t.Errorf("edgereg %s: exit %d (want %d), stdout %q, stderr %q", strings.Join(st.args, " "), code, st.wantCode, out, stderr)
		}
		if strings.Contains(out, "map[") || strings.Contains(out, "&{") { // Go's %v of a value, not a table
			t.Errorf("edgereg %s prints Go values: %q", strings.Join(st.args, " "), out)
		}
		if code != 0 && !strings.HasPrefix(stderr, "edgereg: ") {
			t.Errorf("edgereg %s failed without a clear message: %q", strings.Join(st.args, " "), stderr)
		}
	}
}

func TestCLIFailsClearly(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		env     []string
		args    []string
		code    int
		message string
	}{
		{nil, []string{"--data", dir, "clusters"}, 1, "edgereg node"},
		{[]string{"EDGEREG_TIMEOUT=nope"}, []string{"--data", dir, "clusters"}, 2, "--timeout"},
		{nil, []string{"node", "--expiry-threshold", "10s", "--heartbeat-interval", "30s", "--data", dir}, 2, "--expiry-threshold 10s must exceed --heartbeat-interval"},
		{nil, []string{"node", "--log-format", "xml", "--data", dir}, 2, "--log-format"},
		{[]string{"EDGEREG_MAX_CONNS=many"}, []string{"node", "--data", dir}, 2, "EDGEREG_MAX_CONNS"},
	}
	for _, tc := range cases {
		_, stderr, code := run(t, tc.env, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.message) {
			t.Errorf("edgereg %v: exit %d (want %d), stderr %q (want %q)", tc.args, code, tc.code, stderr, tc.message)
		}
	}
	// A node that is not there: the client says which address failed.
	addr := freeUDPAddr(t)
	// A CA and operator credential, so the failure below is the
	// unreachable node's, not a missing credential's.
	if _, stderr, code := run(t, nil, "--data", dir, "cert", "init"); code != 0 {
		t.Fatalf("cert init: exit %d: %s", code, stderr)
	}
	_, stderr, code := run(t, []string{"EDGEREG_TIMEOUT=2s"}, "--data", dir, "--nodes", addr, "clusters")
	if code != exitUnreachable || !strings.Contains(stderr, addr) {
		t.Errorf("unreachable node: exit %d, %q", code, stderr)
	}
}

func TestNodePrintConfigAndEnv(t *testing.T) {
	out, stderr, code := run(t, []string{"EDGEREG_EXPIRY_THRESHOLD=5m"}, "node", "--print-config", "--scan-interval", "2s")
	if code != 0 {
		t.Fatalf("print-config: %d %s", code, stderr)
	}
	for _, want := range []string{"expiry-threshold", "5m0s", "EDGEREG_EXPIRY_THRESHOLD", "scan-interval", "2s", "addr", "127.0.0.1:9876"} {
		if !strings.Contains(out, want) {
			t.Errorf("print-config lacks %q:\n%s", want, out)
		}
	}
}

func TestNodeProcessStopsGracefully(t *testing.T) {
	dir := t.TempDir()
	addr := freeUDPAddr(t)
	cmd := exec.Command(binary, "node", "--data", dir, "--addr", addr, "--admin-addr", "off", "--log-format", "json")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, code := run(t, []string{"EDGEREG_TIMEOUT=1s"}, "--data", dir, "--nodes", addr, "clusters")
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node did not come up: %s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("node exited with %v after SIGTERM: %s", err, logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("node did not stop after SIGTERM")
	}
	for _, want := range []string{`"msg":"node started"`, `"msg":"node stopped"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %s:\n%s", want, logs.String())
		}
	}
}

func freeUDPAddr(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

func TestNodeConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "edgereg.yaml")
	os.WriteFile(path, []byte("# a node\nexpiry-threshold: 3m\nscan-interval: 7s # comment\nhost: [a.example, b.example]\n"), 0o600)
	out, stderr, code := run(t, []string{"EDGEREG_SCAN_INTERVAL=9s"}, "node", "--config", path, "--print-config")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"3m0s", "9s", "a.example,b.example"} {
		if !strings.Contains(out, want) {
			t.Errorf("print-config lacks %q (the environment wins over the file):\n%s", want, out)
		}
	}
	os.WriteFile(path, []byte("expiry-treshold: 3m\n"), 0o600)
	_, stderr, code = run(t, nil, "node", "--config", path, "--print-config")
	if code != 2 || !strings.Contains(stderr, `unknown setting "expiry-treshold"`) {
		t.Errorf("a typo in the config file: exit %d, %q", code, stderr)
	}
}

func TestCLIPolicies(t *testing.T) {
	addr, dir := cliNode(t)
	env := []string{"EDGEREG_NODES=" + addr, "EDGEREG_DATA=" + dir, "EDGEREG_TIMEOUT=60s"}
	module := filepath.Join("..", "..", "testdata", "wasm", "jitter-threshold.wasm")
	input := filepath.Join(t.TempDir(), "input.json")
	os.WriteFile(input, []byte(`{"broker": {"cluster": "C", "name": "a", "id": 0, "addr": "10.0.0.1:1"}, "stats": {"jitter_ms": 2500}, "default_ms": 120000}`), 0o600)
	steps := []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{[]string{"policy", "ls"}, 0, "(built-in)"},
		{[]string{"policy", "test", module, "--hook", "expiry"}, 0, `{"threshold_ms":`},
		{[]string{"policy", "test", module, "--hook", "expiry", "--input", input}, 0, `{"threshold_ms":130000}`},
		{[]string{"policy", "push", module, "--hook", "expiry"}, 0, "expiry: "},
		{[]string{"policy", "ls", "-o", "json"}, 0, `"hook": "expiry"`},
		{[]string{"policy", "push", module, "--hook", "route"}, 1, "does not implement"},
		{[]string{"policy", "push", "/nonexistent.wasm", "--hook", "route"}, 1, ""},
		{[]string{"policy", "rm", "--hook", "expiry"}, 0, "built-in"},
		{[]string{"policy", "rollback", "--hook", "expiry"}, 0, "expiry: "},
		{[]string{"policy", "push", module}, 2, ""},
	}
	for _, st := range steps {
		out, stderr, code := run(t, env, st.args...)
		if code != st.wantCode || !strings.Contains(out+stderr, st.wantOut) {
			t.Errorf("edgereg %s: exit %d (want %d), stdout %q, stderr %q", strings.Join(st.args, " "), code, st.wantCode, out, stderr)
		}
	}
}

// TestBenchStormHold has the storm's brokers keep their connections and
// reads the node's memory while it holds them.
func TestBenchStormHold(t *testing.T) {
	out, stderr, code := run(t, nil, "bench", "storm", "--storm-hold", "--brokers", "5", "--broker-topics", "3", "-o", "json")
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, stderr)
	}
	var results []benchResult
	if err := json.Unmarshal([]byte(out), &results); err != nil || len(results) != 1 {
		t.Fatalf("bench -o json: %v\n%s", err, out)
	}
	r := results[0]
	if r.Ops != 5 || r.Errors != 0 || r.NodePeakRSSMiB <= 0 || !strings.Contains(r.Note, "holding 5 connections") {
		t.Errorf("storm --storm-hold: %+v", r)
	}
}

// TestBench runs every workload briefly against the fresh node bench starts
// itself, and reads its JSON back.
func TestBench(t *testing.T) {
	out, stderr, code := run(t, nil, "bench", "route", "heartbeat", "register", "storm", "refresh", "watch",
		"--duration", "1s", "--warmup", "200ms", "--workers", "2", "--conns", "1",
		"--topics", "20", "--groups", "2", "--brokers", "5", "--broker-topics", "3",
		"--refresh-topics", "5", "--watchers", "4", "--watchers-per-conn", "2", "--watch-topics", "2", "-o", "json")
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, stderr)
	}
	var results []benchResult
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("bench -o json: %v\n%s", err, out)
	}
	if len(results) != 6 {
		t.Fatalf("%d results, want 6: %s", len(results), out)
	}
	for _, r := range results {
		if r.Ops == 0 || r.Errors != 0 || r.OpsPerSec <= 0 {
			t.Errorf("%s: %+v", r.Workload, r)
		}
	}
	if results[3].Ops != 5 {
		t.Errorf("storm registered %d of 5 brokers", results[3].Ops)
	}
	if r := results[3]; r.NodePeakRSSMiB <= 0 || r.NodeRSSMiB <= 0 || r.NodeRSSMiB > r.NodePeakRSSMiB {
		t.Errorf("storm: node RSS %.1f MiB, peak %.1f MiB", r.NodeRSSMiB, r.NodePeakRSSMiB)
	}
	if r := results[4]; r.TopicRoutesPerSec != 5*r.OpsPerSec {
		t.Errorf("refresh: %.0f topic routes/s at %.0f requests/s of 5 topics", r.TopicRoutesPerSec, r.OpsPerSec)
	}
	if r := results[5]; r.P99Ms <= 0 || r.LastP99Ms <= 0 {
		t.Errorf("watch: latencies p50 %.3f p99 %.3f, to the last watcher p99 %.3f", r.P50Ms, r.P99Ms, r.LastP99Ms)
	}
}
