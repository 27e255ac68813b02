package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/edgereg/edgereg/node"
)

// TestNodePortInUseIsNotUnreachable: a node that cannot bind its port
// exited 4, "unreachable: no node answered in time", which sends a script
// looking for a network problem; a bind failure is the node's own failure
// (exit 1) and its message names the address.
func TestNodePortInUseIsNotUnreachable(t *testing.T) {
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
	} {
		_, stderr, code := run(t, nil, append([]string{"node", "--data", t.TempDir(), "--log-format", "json"}, args...)...)
		if code != exitFailure || !strings.Contains(stderr, "address already in use") {
			t.Errorf("node %v on a port in use: exit %d (want %d), stderr %q", args, code, exitFailure, stderr)
		}
	}
}

// TestNodeRefusesZeroAndNegativeSettings: a zero from the command line, a
// variable or the config file silently became the default (--max-conns 0
// ran with 10000 while --print-config showed 0), and --workers -1 ran with
// the default worker count; every such value is refused, naming the flag.
// 0 stays valid where the flag's own default is 0 (auto).
func TestNodeRefusesZeroAndNegativeSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edgereg.yaml")
	if err := os.WriteFile(file, []byte("scan-interval: 0s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		env  []string
		args []string
		flag string
	}{
		{nil, []string{"--max-conns", "0"}, "--max-conns"},
		{nil, []string{"--heartbeat-interval", "0s"}, "--heartbeat-interval"},
		{[]string{"EDGEREG_MAX_REQUEST_SIZE=0"}, nil, "--max-request-size"},
		{nil, []string{"--config", file}, "--scan-interval"},
		{nil, []string{"--workers", "-1"}, "--workers"},
		{nil, []string{"--broker-workers", "-4"}, "--broker-workers"},
	}
	for _, tc := range cases {
		_, stderr, code := run(t, tc.env, append([]string{"node", "--print-config"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.flag) {
			t.Errorf("node %v %v: exit %d (want %d), stderr %q (want %s named)", tc.env, tc.args, code, exitUsage, stderr, tc.flag)
		}
	}
	m := printConfigJSON(t, nil, "--workers", "0", "--max-handshakes", "0", "--warm-up", "0s")
	def := node.Config{}.WithDefaults()
	for name, want := range map[string]string{
		"workers":        strconv.Itoa(def.Workers),
		"broker-workers": strconv.Itoa(def.BrokerWorkers),
		"max-handshakes": strconv.Itoa(def.MaxHandshakes),
		"warm-up":        def.WarmUp.String(),
	} {
		if got := m[name].Value; got != want {
			t.Errorf("print-config %s = %q, want the value the node uses, %q", name, got, want)
		}
	}
}

// TestGatewayAdminServerTimesOut: the gateway's admin server had a header
// timeout alone, so a client that sent its headers and then its body a
// byte at a time, or kept an idle connection open, held a connection (and
// a file descriptor) for ever; the README says every HTTP server has read,
// write and idle timeouts, as the node's do.
func TestGatewayAdminServerTimesOut(t *testing.T) {
	srv := gatewayAdminServer(http.NotFoundHandler(), discardLogger())
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 {
		t.Errorf("gateway admin server: read header %s, read %s, write %s, idle %s; want every timeout set",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
}

// TestNodesWithoutPortIsUsage: `--nodes nohost` (no port) exited 1, "any
// other failure", after a dial attempt; a malformed address is a wrong
// argument (exit 2), named before anything is dialled.
func TestNodesWithoutPortIsUsage(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := run(t, nil, "--data", dir, "cert", "init"); code != 0 {
		t.Fatalf("cert init: exit %d: %s", code, stderr)
	}
	for _, args := range [][]string{
		{"clusters", "--nodes", "nohost"},
		{"route", "orders", "--nodes", "127.0.0.1:9876,nohost", "--wait", "0s"},
		{"kv", "put", "ns", "k", "v", "--nodes", "nohost"},
	} {
		_, stderr, code := run(t, []string{"EDGEREG_TIMEOUT=2s"}, append([]string{"--data", dir}, args...)...)
		if code != exitUsage || !strings.Contains(stderr, `--nodes "nohost"`) {
			t.Errorf("edgereg %v: exit %d (want %d), stderr %q", args, code, exitUsage, stderr)
		}
	}
}

// TestConfigFileRefusesClientSettings: the node's config file accepted the
// client commands' settings (cert, key, ca, nodes, timeout), which the node
// never reads: `cert: node.crt` looked like the node's certificate and was
// ignored without a word. Such a key is an error naming the line and the
// node's own setting; data (the node's directory) and output (the format
// of --print-config) stay valid.
func TestConfigFileRefusesClientSettings(t *testing.T) {
	dir := t.TempDir()
	for key, want := range map[string]string{
		"cert: node.crt": `:2: cert is a client setting the node does not use (did you mean "tls-cert"?)`,
		"ca: ca.crt":     `:2: ca is a client setting the node does not use`,
		"nodes: [a:1]":   `:2: nodes is a client setting the node does not use`,
		"timeout: 5s":    `:2: timeout is a client setting`,
		"key: node.key":  `:2: key is a client setting`,
	} {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte("max-conns: 5\n"+key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := run(t, nil, "node", "--print-config", "--config", path)
		if code != exitUsage || !strings.Contains(stderr, path+want) {
			t.Errorf("%s: exit %d, stderr %q; want %q", key, code, stderr, path+want)
		}
	}
	path := filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(path, []byte("data: "+dir+"\noutput: json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := printConfigJSON(t, nil, "--config", path)
	if m["data"].Value != dir {
		t.Errorf("data from the config file = %+v", m["data"])
	}
	// A flag added to the root later is classified too.
	newRootCmd().PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if _, ok := clientSettings[f.Name]; !ok && f.Name != "data" && f.Name != "output" {
			t.Errorf("root flag --%s: is it the node's (config.go clientSettings)?", f.Name)
		}
	})
}

// TestEveryNodeReadsUnreachable: status, ping and the --all-nodes reads
// exited 1 when no node answered; the exit code table says 4
// (unreachable), as every other command does. When some nodes answer
// they still exit 1, as their help says, with the answers printed.
func TestEveryNodeReadsUnreachable(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := run(t, nil, "--data", dir, "cert", "init"); code != 0 {
		t.Fatalf("cert init: exit %d: %s", code, stderr)
	}
	dead := freeUDPAddr(t)
	for _, args := range [][]string{
		{"status"}, {"ping", "--count", "1"}, {"leases", "--all-nodes"}, {"topics", "--all-nodes"}, {"clusters", "--all-nodes"},
	} {
		out, stderr, code := run(t, []string{"EDGEREG_TIMEOUT=1s"}, append([]string{"--data", dir, "--nodes", dead, "-o", "json"}, args...)...)
		if code != exitUnreachable || !strings.Contains(out, dead) {
			t.Errorf("edgereg %v with no node answering: exit %d (want %d), stdout %q, stderr %q", args, code, exitUnreachable, out, stderr)
		}
	}
}

// TestNodeRefusesEmptySettings: an empty variable (EDGEREG_ADDR= in a
// systemd EnvironmentFile) ran the node on the default address while
// --print-config showed an empty one from EDGEREG_ADDR; an empty value
// where the default is not empty is refused, naming the flag.
func TestNodeRefusesEmptySettings(t *testing.T) {
	for _, env := range []string{"EDGEREG_ADDR=", "EDGEREG_ADMIN_ADDR=", "EDGEREG_DATA=", "EDGEREG_TLS_KEY_EXCHANGE="} {
		flag := "--" + strings.ReplaceAll(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(env, "EDGEREG_"), "=")), "_", "-")
		_, stderr, code := run(t, []string{env}, "node", "--print-config")
		if code != exitUsage || !strings.Contains(stderr, flag) {
			t.Errorf("%s: exit %d (want %d), stderr %q (want %s named)", env, code, exitUsage, stderr, flag)
		}
	}
	// A client command's variable is not the node's to refuse.
	if _, stderr, code := run(t, []string{"EDGEREG_TIMEOUT="}, "node", "--print-config"); code != 0 {
		t.Errorf("EDGEREG_TIMEOUT= stopped the node: exit %d, %q", code, stderr)
	}
}

// TestLogsPlainWhenNotATerminal: logs to a pipe (a file, journald, a
// container runtime) are JSON by default and never carry ANSI colour, even
// as --log-format text; colour is for a terminal alone.
func TestLogsPlainWhenNotATerminal(t *testing.T) {
	for _, format := range []string{"auto", "text", "json"} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		log, err := newLogger(w, format, "info", nil)
		if err != nil {
			t.Fatal(err)
		}
		log.Warn("broker expired", "broker", "b1")
		w.Close()
		b, _ := io.ReadAll(r)
		r.Close()
		line := string(b)
		if strings.Contains(line, "\x1b[") {
			t.Errorf("--log-format %s to a pipe has ANSI colour: %q", format, line)
		}
		var v map[string]any
		isJSON := json.Unmarshal(b, &v) == nil
		if wantJSON := format != "text"; isJSON != wantJSON || !strings.Contains(line, "broker expired") {
			t.Errorf("--log-format %s to a pipe: %q (JSON %v, want %v)", format, line, isJSON, wantJSON)
		}
	}
}

// TestUnansweredNodeHasNoFacts: in status and ping -o json a node that did
// not answer carried "warming_up": false, "lease_count": 0 and round trips
// of 0 beside its error, so `jq '.nodes[] | select(.warming_up == false)'`
// listed a dead node as ready. It has its address and error only.
func TestUnansweredNodeHasNoFacts(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := run(t, nil, "--data", dir, "cert", "init"); code != 0 {
		t.Fatalf("cert init: exit %d: %s", code, stderr)
	}
	dead := freeUDPAddr(t)
	for _, args := range [][]string{{"status"}, {"ping", "--count", "1"}} {
		out, _, _ := run(t, []string{"EDGEREG_TIMEOUT=1s"}, append([]string{"--data", dir, "--nodes", dead, "-o", "json"}, args...)...)
		var list []map[string]any
		if args[0] == "status" {
			var st struct{ Nodes []map[string]any }
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, out)
			}
			list = st.Nodes
		} else if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if len(list) != 1 {
			t.Fatalf("%v: %d nodes\n%s", args, len(list), out)
		}
		for k := range list[0] {
			if k != "node" && k != "error" {
				t.Errorf("%v: the node that did not answer has %q: %v", args, k, list[0])
			}
		}
	}
}

// TestPolicyHookCheckedLocally: `policy push|rollback|rm --hook bogus` was
// sent to every node and exited 1 with each node's refusal; a wrong hook
// is a usage error (exit 2) found before anything is sent. A node's
// refusal of a real hook has no "value" beside its error (it printed
// ": built-in behaviour").
func TestPolicyHookCheckedLocally(t *testing.T) {
	addr, dir := cliNode(t)
	env := []string{"EDGEREG_TIMEOUT=5s"}
	module := filepath.Join(t.TempDir(), "junk.wasm")
	if err := os.WriteFile(module, []byte("not wasm"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"policy", "push", module, "--hook", "bogus"},
		{"policy", "rollback", "--hook", "bogus"},
		{"policy", "rm", "--hook", "bogus"},
	} {
		out, stderr, code := run(t, env, append([]string{"--data", dir, "--nodes", addr, "-o", "json"}, args...)...)
		if code != exitUsage || !strings.Contains(stderr, "--hook") || out != "" {
			t.Errorf("edgereg %v: exit %d (want %d), stdout %q, stderr %q", args, code, exitUsage, out, stderr)
		}
	}
	out, _, code := run(t, env, "--data", dir, "--nodes", addr, "-o", "json", "policy", "push", module, "--hook", "route")
	var results []map[string]any
	if err := json.Unmarshal([]byte(out), &results); err != nil || code == 0 || len(results) != 1 {
		t.Fatalf("push of a module that is not wasm: exit %d, %v\n%s", code, err, out)
	}
	if v, ok := results[0]["value"]; ok {
		t.Errorf("a refused push has value %q beside its error", v)
	}
}

// TestRefusedChangeHasNoValue: `perm wipe` refused by a node printed
// "value": {"topics_changed": 0} beside the error, a count that reads as
// an answer; a failed node's result has its error alone.
func TestRefusedChangeHasNoValue(t *testing.T) {
	addr, dir := cliNode(t)
	cl := t.TempDir()
	if _, stderr, code := run(t, nil, "--data", dir, "cert", "issue", "--role", "client", "--name", "c1", "--out", cl); code != 0 {
		t.Fatalf("cert issue: exit %d: %s", code, stderr)
	}
	out, _, code := run(t, []string{"EDGEREG_TIMEOUT=5s"}, "--nodes", addr, "-o", "json", "--cert", filepath.Join(cl, "c1.crt"),
		"--key", filepath.Join(cl, "c1.key"), "--ca", filepath.Join(cl, "ca.crt"), "perm", "wipe", "broker-a")
	var results []map[string]any
	if err := json.Unmarshal([]byte(out), &results); err != nil || code != exitRefused || len(results) != 1 {
		t.Fatalf("perm wipe as a client: exit %d, %v\n%s", code, err, out)
	}
	if v, ok := results[0]["value"]; ok {
		t.Errorf("a refused perm wipe has value %v beside its error", v)
	}
}

// TestNodeStopPastDeadlineExitsFailure: a node whose graceful stop ran
// past --shutdown-timeout exited 4 ("unreachable", for the deadline's
// context.DeadlineExceeded); the node's own failures exit 1. And
// --shutdown-timeout 0 made every stop such a failure: it is refused.
func TestNodeStopPastDeadlineExitsFailure(t *testing.T) {
	if _, stderr, code := run(t, nil, "node", "--print-config", "--shutdown-timeout", "0s"); code != exitUsage || !strings.Contains(stderr, "--shutdown-timeout") {
		t.Errorf("--shutdown-timeout 0s: exit %d (want %d), %q", code, exitUsage, stderr)
	}
	cmd := exec.Command(binary, "node", "--data", t.TempDir(), "--addr", freeUDPAddr(t), "--admin-addr", "off",
		"--log-format", "json", "--shutdown-timeout", "1ns")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stderr)
	var logs strings.Builder
	for lines.Scan() {
		logs.WriteString(lines.Text() + "\n")
		if strings.Contains(lines.Text(), `"msg":"node started"`) {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	for lines.Scan() {
		logs.WriteString(lines.Text() + "\n")
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFailure || !strings.Contains(logs.String(), "shutdown") {
		t.Errorf("node stopped past its 1ns deadline: %v (want exit %d)\n%s", err, exitFailure, logs.String())
	}
}

// TestNoAgreementClaimedWhenNoNodeAnswered: status and the --all-nodes
// reads ended their tables with "no drift between the nodes that answered"
// and "every node that answered agrees" when no node had answered, which
// reads as a healthy fleet to an operator glancing at the last line.
func TestNoAgreementClaimedWhenNoNodeAnswered(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := run(t, nil, "--data", dir, "cert", "init"); code != 0 {
		t.Fatalf("cert init: exit %d: %s", code, stderr)
	}
	dead := freeUDPAddr(t)
	for _, args := range [][]string{{"status"}, {"leases", "--all-nodes"}, {"topics", "--all-nodes"}} {
		out, _, code := run(t, []string{"EDGEREG_TIMEOUT=1s"}, append([]string{"--data", dir, "--nodes", dead}, args...)...)
		if code != exitUnreachable {
			t.Errorf("%v: exit %d, want %d", args, code, exitUnreachable)
		}
		if strings.Contains(out, "no drift") || strings.Contains(out, "agrees") {
			t.Errorf("%v with no node answering claims agreement:\n%s", args, out)
		}
	}
}

// TestPolicyLsShowsSavedPolicyNotRestored: a saved policy a start could
// not restore (its module file damaged, or refused by tighter limits)
// left the hook built-in while policy ls showed it as "(built-in)" and
// nothing else: the operator saw no policy, though one is saved and
// will come back at the next start that can restore it. ls shows it as
// saved and not restored, with why, until it is restored, replaced or
// removed.
func TestPolicyLsShowsSavedPolicyNotRestored(t *testing.T) {
	dir := t.TempDir()
	addr, stop := cliNodeIn(t, dir)
	env := []string{"EDGEREG_NODES=" + addr, "EDGEREG_DATA=" + dir, "EDGEREG_TIMEOUT=60s"}
	module := filepath.Join("..", "..", "testdata", "wasm", "jitter-threshold.wasm")
	if out, stderr, code := run(t, env, "policy", "push", module, "--hook", "expiry"); code != 0 {
		t.Fatalf("push: exit %d\n%s%s", code, out, stderr)
	}
	b, err := os.ReadFile(module)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	hash := hex.EncodeToString(sum[:])
	stop()
	saved := filepath.Join(dir, "policies", hash+".wasm")
	if err := os.WriteFile(saved, append(b, 0), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ = cliNodeIn(t, dir)
	env[0] = "EDGEREG_NODES=" + addr
	type lsOut []struct {
		Policies []policyOut `json:"policies"`
	}
	var expiry policyOut
	deadline := time.Now().Add(30 * time.Second)
	for expiry.SavedError == "" {
		if time.Now().After(deadline) {
			t.Fatalf("policy ls never said the saved expiry policy was not restored: %+v", expiry)
		}
		out, stderr, code := run(t, env, "-o", "json", "policy", "ls")
		var ls lsOut
		if err := json.Unmarshal([]byte(out), &ls); code != 0 || err != nil || len(ls) != 1 {
			t.Fatalf("policy ls: exit %d, %v\n%s%s", code, err, out, stderr)
		}
		for _, p := range ls[0].Policies {
			if p.Hook == "expiry" {
				expiry = p
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if expiry.Hash != "" || expiry.SavedHash != hash || !strings.Contains(expiry.SavedError, "does not match its hash") {
		t.Errorf("expiry in policy ls -o json: %+v; want no active hash, saved_hash %.12s, an error naming the damaged file", expiry, hash)
	}
	out, _, _ := run(t, env, "policy", "ls")
	if !strings.Contains(out, "saved") || !strings.Contains(out, hash[:12]) || !strings.Contains(out, "not restored: ") {
		t.Errorf("policy ls does not show the saved expiry policy as not restored:\n%s", out)
	}
	// rm drops what was saved: nothing is left to show.
	if out, stderr, code := run(t, env, "policy", "rm", "--hook", "expiry"); code != 0 {
		t.Fatalf("rm: exit %d\n%s%s", code, out, stderr)
	}
	if out, _, _ := run(t, env, "policy", "ls"); strings.Contains(out, "saved") {
		t.Errorf("after rm, policy ls still shows a saved policy:\n%s", out)
	}
}
