package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNodeOnPortInUseLeavesDataDirAlone: `node --data NEWDIR` on a port
// another process holds created NEWDIR with a fresh CA, node id, keys and
// policy directories before it failed to bind, so the operator's retry on
// another port found a CA nobody had asked for (and a typo in --data left
// a directory of secrets behind). The node binds its sockets first: a
// failed start leaves the directory as it found it, missing or empty.
func TestNodeOnPortInUseLeavesDataDirAlone(t *testing.T) {
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	for _, args := range [][]string{
		{"--addr", udp.LocalAddr().String(), "--admin-addr", "off"},
		{"--addr", freeUDPAddr(t), "--admin-addr", tcp.Addr().String()},
		{"--addr", freeUDPAddr(t), "--admin-addr", "off", "--remoting-addr", tcp.Addr().String()},
		{"--addr", freeUDPAddr(t), "--admin-addr", "127.0.0.1:0", "--status-addr", tcp.Addr().String()},
	} {
		parent := t.TempDir()
		fresh := filepath.Join(parent, "new")
		empty := filepath.Join(parent, "empty")
		if err := os.Mkdir(empty, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{fresh, empty} {
			_, stderr, code := run(t, nil, append([]string{"node", "--data", dir, "--log-format", "json"}, args...)...)
			if code != exitFailure || !strings.Contains(stderr, "address already in use") {
				t.Errorf("node %v on a port in use: exit %d (want %d), stderr %q", args, code, exitFailure, stderr)
			}
			entries, err := os.ReadDir(dir)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if len(names) > 0 {
				t.Errorf("node %v on a port in use left %s with %v, want it as it was (missing or empty)", args, dir, names)
			}
		}
	}
}

// TestNodeRefusesEmptyNodeID: an empty (or blank) node-id file, what a
// full disk or a crash of another tool leaves, was replaced by a new id
// without a word, so the node came back as another node (its status,
// metrics and the brokers' view of it all changed) while the operator
// believed the data directory intact. It is refused as a damaged file,
// naming the file and what to do, and left as it was.
func TestNodeRefusesEmptyNodeID(t *testing.T) {
	for _, content := range []string{"", " \n"} {
		dir := t.TempDir()
		path := filepath.Join(dir, "node-id")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := run(t, nil, "node", "--data", dir, "--addr", freeUDPAddr(t), "--admin-addr", "off", "--log-format", "json")
		if code != exitFailure || !strings.Contains(stderr, path) || !strings.Contains(stderr, "delete it") {
			t.Errorf("node on an empty node-id file %q: exit %d (want %d), stderr %q; want it refused, naming %s and what to do",
				content, code, exitFailure, stderr, path)
		}
		if b, _ := os.ReadFile(path); string(b) != content {
			t.Errorf("the damaged node-id file was rewritten: %q, want %q as it was", b, content)
		}
	}
}

// TestSecondSignalCutsShutdownShort: a node stopping with requests in
// progress waited the whole --shutdown-timeout whatever the operator did; a
// second Ctrl-C (or SIGTERM) did nothing, so the only way out before the
// deadline was kill -9. The second signal ends the graceful stop at once:
// the node stops, says why, and exits 1, as a stop past its deadline does.
func TestSecondSignalCutsShutdownShort(t *testing.T) {
	dir, addr := t.TempDir(), freeUDPAddr(t)
	n := startProcess(t, "node", "--data", dir, "--addr", addr, "--admin-addr", "off", "--log-format", "json",
		"--warm-up", "-1s", "--policy-call-timeout", "1h", "--shutdown-timeout", "1h")
	waitLog(t, n, `"msg":"node started"`)
	input := filepath.Join(t.TempDir(), "input.json")
	if err := os.WriteFile(input, []byte(`{"topic": "t"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// loop.wasm passes the dry run and then loops for the call timeout
	// (1h), holding a request in progress until then.
	module := filepath.Join("..", "..", "testdata", "wasm", "hostile", "loop.wasm")
	test := []string{"--data", dir, "--nodes", addr, "--timeout", "1h", "policy", "test", module, "--hook", "route", "--input", input}
	startProcess(t, test...)
	// Tests run one at a time: a second one, given 5 s, is answered busy,
	// waiting for another policy test, only while the first is running.
	deadline := time.Now().Add(60 * time.Second)
	probe := append([]string{}, test...)
	probe[5] = "5s"
	for {
		_, stderr, _ := run(t, nil, probe...)
		if strings.Contains(stderr, "waiting for another policy test") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hanging policy test never ran; last probe: %s\n%s", stderr, n.logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	n.cmd.Process.Signal(syscall.SIGINT)
	waitLog(t, n, `"msg":"node shutting down"`)
	n.cmd.Process.Signal(syscall.SIGINT)
	n.waitEnd(t, 60*time.Second, "a second SIGINT did not cut the 1h --shutdown-timeout short")
	if code := n.cmd.ProcessState.ExitCode(); code != exitFailure || !strings.Contains(n.logs.String(), "second signal") {
		t.Errorf("node stopped by a second signal: exit %d (want %d) and logs naming the second signal:\n%s", code, exitFailure, n.logs)
	}
}

// TestOneSignalStopsQuietly: the second-signal warning is for a second
// signal only; one stop is graceful, exit 0, with no such line.
func TestOneSignalStopsQuietly(t *testing.T) {
	n := startProcess(t, "node", "--data", t.TempDir(), "--addr", freeUDPAddr(t), "--admin-addr", "off", "--log-format", "json")
	waitLog(t, n, `"msg":"node started"`)
	n.cmd.Process.Signal(syscall.SIGTERM)
	n.waitEnd(t, 60*time.Second, "node did not stop on SIGTERM")
	if n.err != nil || strings.Contains(n.logs.String(), "second signal") || !strings.Contains(n.logs.String(), `"msg":"node stopped"`) {
		t.Errorf("node stopped by one SIGTERM: %v, logs:\n%s\nwant exit 0, \"node stopped\" and no second-signal line", n.err, n.logs)
	}
}

// waitLog waits until a process's stderr holds want.
func waitLog(t *testing.T, p *process, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(p.logs.String(), want) {
		select {
		case <-p.done:
			t.Fatalf("process ended before logging %s: %v\n%s", want, p.err, p.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s in the logs:\n%s", want, p.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDataDirErrorsSayWhatToDo: a node refused a damaged file of its data
// directory, or a directory another node holds, with the bare cause ("load
// KV config .../kvconfig.json: invalid character 'g'", "... in use by
// another node (it holds .../lock)"), leaving the operator to guess whether
// deleting the file loses anything. Each message names the file and what to
// do about it.
func TestDataDirErrorsSayWhatToDo(t *testing.T) {
	seed := t.TempDir()
	n := startProcess(t, "node", "--data", seed, "--addr", freeUDPAddr(t), "--admin-addr", "off", "--log-format", "json")
	waitLog(t, n, `"msg":"node started"`)
	_, stderr, code := run(t, nil, "node", "--data", seed, "--addr", freeUDPAddr(t), "--admin-addr", "off", "--log-format", "json")
	if code != exitFailure || !strings.Contains(stderr, "stop that node") || !strings.Contains(stderr, "another --data") {
		t.Errorf("second node on a held data directory: exit %d, %q; want exit %d and what to do", code, stderr, exitFailure)
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	<-n.done
	cases := []struct{ file, want string }{
		{"kvconfig.json", "move it aside to start with an empty KV config"},
		{"quic-reset.key", "delete it"},
		{"quic-token.key", "delete it"},
		{filepath.Join("tls", "ca.crt"), "re-issue"},
		{filepath.Join("tls", "ca.key"), "re-issue"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS(seed)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, c.file), []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := run(t, nil, "node", "--data", dir, "--addr", freeUDPAddr(t), "--admin-addr", "off", "--log-format", "json")
		if code != exitFailure || !strings.Contains(stderr, filepath.Join(dir, c.file)) || !strings.Contains(stderr, c.want) {
			t.Errorf("node on a damaged %s: exit %d, %q; want exit %d, the file named and %q", c.file, code, stderr, exitFailure, c.want)
		}
	}
}

// TestGatewayRefusesInvalidSettings: the gateway took a zero or negative
// setting as its default without a word (--max-brokers 0 ran with 1000,
// --request-timeout -1s with 3s), where the node refuses them naming the
// flag; and --request-timeout past 4s was refused naming "upstream
// timeout", a setting the gateway has no flag for. Each is a usage error
// (exit 2) naming the flag.
func TestGatewayRefusesInvalidSettings(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := run(t, nil, "--data", dir, "cert", "init"); code != 0 {
		t.Fatalf("cert init: exit %d: %s", code, stderr)
	}
	for _, c := range []struct{ flag, value, want string }{
		{"--request-timeout", "0s", "must be positive"},
		{"--request-timeout", "-1s", "may not be negative"},
		{"--request-timeout", "5s", "at most 4s"},
		{"--max-brokers", "0", "must be positive"},
		{"--max-topics", "-1", "may not be negative"},
		{"--shutdown-timeout", "0s", "must be positive"},
		{"--broker-timeout", "0s", "must be positive"},
		{"--max-buffered-bytes", "0", "must be positive"},
		{"--listen", "", "may not be empty"},
	} {
		_, stderr, code := run(t, nil, "--data", dir, "--nodes", freeUDPAddr(t), "gateway", "--listen", "127.0.0.1:0",
			"--admin-addr", "off", "--log-format", "json", c.flag+"="+c.value)
		if code != exitUsage || !strings.Contains(stderr, c.flag) || !strings.Contains(stderr, c.want) {
			t.Errorf("gateway %s=%s: exit %d, %q; want exit %d naming %s, %q", c.flag, c.value, code, stderr, exitUsage, c.flag, c.want)
		}
	}
}

// TestBrokerAgentRefusesInvalidSettings: `broker --queues -1` registered
// its topics with 4294967295 read and write queues (the int wrapped into
// the wire's uint32), --queues 0 with none (a topic nobody can write), and
// --heartbeat-interval 0s or -1s ran with the default 30s without a word.
// Each is a usage error (exit 2) naming the flag, before anything is sent.
func TestBrokerAgentRefusesInvalidSettings(t *testing.T) {
	addr, dir := cliNode(t)
	for _, c := range []struct{ flag, value, want string }{
		{"--queues", "-1", "may not be negative"},
		{"--queues", "0", "must be positive"},
		{"--queues", "4294967297", "at most 2147483647"},
		{"--heartbeat-interval", "0s", "must be positive"},
		{"--heartbeat-interval", "-1s", "may not be negative"},
		{"--fake-topics", "-1", "may not be negative"},
	} {
		_, stderr, code := run(t, []string{"EDGEREG_TIMEOUT=3s"}, "--data", dir, "--nodes", addr, "broker", "--name", "b-invalid",
			"--addr", "10.0.0.7:10911", "--topics", "t-invalid", "--log-format", "json", c.flag+"="+c.value)
		if code != exitUsage || !strings.Contains(stderr, c.flag) || !strings.Contains(stderr, c.want) {
			t.Errorf("broker %s=%s: exit %d, %q; want exit %d naming %s, %q", c.flag, c.value, code, stderr, exitUsage, c.flag, c.want)
		}
	}
	if out, _, _ := run(t, []string{"EDGEREG_TIMEOUT=3s"}, "--data", dir, "--nodes", addr, "route", "t-invalid", "--wait", "0s"); out != "" {
		t.Errorf("a refused broker agent registered its topic:\n%s", out)
	}
}

// TestMissingCredentialFilesNameTheFlag: a node given a --revocations or
// --tls-* path that does not exist failed with "credentials: stat
// nope.txt: no such file or directory", exit 1: no flag named, and not the
// usage exit (2) that a --policy-dir that is no directory gets. A missing
// file of the configuration is an invalid setting, refused naming its flag.
func TestMissingCredentialFilesNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := run(t, nil, "--data", dir, "cert", "init"); code != 0 {
		t.Fatalf("cert init: exit %d: %s", code, stderr)
	}
	tls := filepath.Join(dir, "tls")
	missing := filepath.Join(t.TempDir(), "missing")
	for _, c := range []struct {
		flag string
		args []string
	}{
		{"--revocations", []string{"--revocations", missing}},
		{"--tls-cert", []string{"--tls-cert", missing, "--tls-key", filepath.Join(tls, "operator.key"), "--tls-client-ca", filepath.Join(tls, "ca.crt")}},
		{"--tls-key", []string{"--tls-cert", filepath.Join(tls, "operator.crt"), "--tls-key", missing, "--tls-client-ca", filepath.Join(tls, "ca.crt")}},
		{"--tls-client-ca", []string{"--tls-cert", filepath.Join(tls, "operator.crt"), "--tls-key", filepath.Join(tls, "operator.key"), "--tls-client-ca", missing}},
	} {
		args := append([]string{"node", "--data", t.TempDir(), "--addr", freeUDPAddr(t), "--admin-addr", "off", "--log-format", "json"}, c.args...)
		_, stderr, code := run(t, nil, args...)
		if code != exitUsage || !strings.Contains(stderr, c.flag+" "+strconvQuote(missing)) || !strings.Contains(stderr, "no such file") {
			t.Errorf("node %s MISSING: exit %d, %q; want exit %d naming %s %q", c.flag, code, stderr, exitUsage, c.flag, missing)
		}
	}
}

func strconvQuote(s string) string { return `"` + s + `"` }

// TestStatusRefusesNegativeLeaseTolerance: `status --lease-tolerance -1`
// was taken, and then reported drift between nodes holding the same
// number of leases (0 > -1); it is a usage error naming the flag.
func TestStatusRefusesNegativeLeaseTolerance(t *testing.T) {
	addr, dir := cliNode(t)
	_, stderr, code := run(t, nil, "--data", dir, "--nodes", addr+","+addr, "status", "--lease-tolerance", "-1")
	if code != exitUsage || !strings.Contains(stderr, "--lease-tolerance") {
		t.Errorf("status --lease-tolerance -1: exit %d, %q; want exit %d naming the flag", code, stderr, exitUsage)
	}
}
