package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire"
)

// checkSnakeCase fails for any object key in a JSON document that is not
// snake_case (map keys that are data, such as KV keys, are skipped by the
// caller's choice of documents).
func checkSnakeCase(t *testing.T, where, doc string) {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", where, err, doc)
	}
	snake := regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)*$`)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !snake.MatchString(k) {
					t.Errorf("%s: key %s.%s is not snake_case", where, path, k)
				}
				walk(path+"."+k, x)
			}
		case []any:
			for _, x := range v {
				walk(path+"[]", x)
			}
		}
	}
	walk("", v)
}

// TestJSONOutputIsSnakeCase runs every read command and a change with -o
// json: one naming style, 64-bit numbers as strings, RFC 3339 times.
func TestJSONOutputIsSnakeCase(t *testing.T) {
	addr, dir := cliNode(t)
	registerBroker(t, addr, dir, &wire.Register{Cluster: "DefaultCluster", BrokerName: "broker-a", Addr: "10.0.0.1:10911",
		Zone: "z1", DataVersion: wire.DataVersion{State: 1 << 60, Counter: 1},
		Topics: []wire.TopicConfig{{Name: "orders", ReadQueues: 4, WriteQueues: 4, Perm: 6}}})
	env := []string{"EDGEREG_NODES=" + addr, "EDGEREG_DATA=" + dir}
	for _, args := range [][]string{
		{"route", "orders"}, {"clusters"}, {"topics"}, {"leases"}, {"version"},
		{"kv", "put", "ns", "k", "v"}, {"kv", "get", "ns", "k"}, {"kv", "del", "ns", "k"},
		{"perm", "wipe", "broker-a"}, {"perm", "add", "broker-a"},
		{"node", "--print-config"}, {"policy", "ls"},
		{"cert", "issue", "--role", "client", "--name", "json-client", "--out", t.TempDir()},
	} {
		out, stderr, code := run(t, env, append(args, "-o", "json")...)
		if code != 0 {
			t.Errorf("%v -o json: exit %d: %s", args, code, stderr)
			continue
		}
		checkSnakeCase(t, strings.Join(args, " "), out)
	}

	out, _, _ := run(t, env, "leases", "-o", "json")
	var leases []map[string]any
	json.Unmarshal([]byte(out), &leases)
	if len(leases) != 1 {
		t.Fatalf("leases -o json: %s", out)
	}
	if _, ok := leases[0]["epoch"].(string); !ok {
		t.Errorf("epoch %v (%T) is not a string; a 64-bit epoch would lose digits in jq", leases[0]["epoch"], leases[0]["epoch"])
	}
	dv, _ := leases[0]["data_version"].(map[string]any)
	if dv["state"] != fmt.Sprint(uint64(1)<<60) {
		t.Errorf("data_version.state = %v, want the exact 64-bit value as a string", dv["state"])
	}
	for _, k := range []string{"last_heartbeat", "deadline"} {
		s, _ := leases[0][k].(string)
		if _, err := time.Parse(time.RFC3339, s); err != nil {
			t.Errorf("%s = %v: not RFC 3339", k, leases[0][k])
		}
	}

	out, _, _ = run(t, env, "route", "orders", "-o", "json")
	var routes []struct {
		Topic        string                        `json:"topic"`
		Queues       []struct{ BrokerName string } `json:"queues"`
		BrokerGroups []struct {
			Name    string `json:"name"`
			Brokers []struct {
				BrokerID int64  `json:"broker_id"`
				Addr     string `json:"addr"`
			} `json:"brokers"`
		} `json:"broker_groups"`
	}
	if err := json.Unmarshal([]byte(out), &routes); err != nil || len(routes) != 1 || len(routes[0].BrokerGroups) != 1 ||
		routes[0].BrokerGroups[0].Brokers[0].Addr != "10.0.0.1:10911" {
		t.Errorf("route -o json = %s (%v)", out, err)
	}
}

// TestExitCodes: scripts tell not-found, unreachable, refused and partial
// failure apart by the exit code (the table is in README.md).
func TestExitCodes(t *testing.T) {
	addr, dir := cliNode(t)
	otherAddr, _ := cliNode(t) // a node of another CA
	dead := freeUDPAddr(t)
	env := []string{"EDGEREG_NODES=" + addr, "EDGEREG_DATA=" + dir, "EDGEREG_TIMEOUT=3s"}
	clientCreds := t.TempDir()
	if _, stderr, code := run(t, env, "cert", "issue", "--role", "client", "--name", "reader", "--out", clientCreds); code != 0 {
		t.Fatal(stderr)
	}
	asClient := append(env[:len(env):len(env)], "EDGEREG_CERT="+filepath.Join(clientCreds, "reader.crt"),
		"EDGEREG_KEY="+filepath.Join(clientCreds, "reader.key"), "EDGEREG_CA="+filepath.Join(clientCreds, "ca.crt"))
	cases := []struct {
		name string
		env  []string
		args []string
		code int
	}{
		{"missing KV key", env, []string{"kv", "get", "ns", "nope"}, exitNotFound},
		{"missing topic", env, []string{"route", "nope", "--wait", "0"}, exitNotFound},
		{"nothing listening", env, []string{"--nodes", dead, "--timeout", "1s", "clusters"}, exitUnreachable},
		{"node of another CA", env, []string{"--nodes", otherAddr, "clusters"}, exitRefused},
		{"client credential may not write", asClient, []string{"kv", "put", "ns", "k", "v"}, exitRefused},
		{"one of two nodes down", env, []string{"--nodes", addr + "," + dead, "--timeout", "1s", "kv", "put", "ns", "k", "v"}, exitPartial},
		{"bad flag", env, []string{"clusters", "--nope"}, exitUsage},
	}
	for _, tc := range cases {
		out, stderr, code := run(t, tc.env, tc.args...)
		if code != tc.code {
			t.Errorf("%s: edgereg %v: exit %d, want %d; stdout %q stderr %q", tc.name, tc.args, code, tc.code, out, stderr)
		}
	}
	// A partial failure still reports every node's result.
	out, _, _ := run(t, env, "--nodes", addr+","+dead, "--timeout", "1s", "kv", "put", "ns", "k", "v", "-o", "json")
	var results []struct {
		Node  string `json:"node"`
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &results); err != nil || len(results) != 2 || !results[0].OK || results[1].OK || results[1].Error == "" {
		t.Errorf("partial kv put -o json = %s (%v)", out, err)
	}
}

// startRoute runs `edgereg route` in the background and returns a function
// that waits for it.
func startRoute(t *testing.T, env []string, args ...string) func() (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	return func() (string, string, int) {
		defer cancel()
		cmd.Wait()
		return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
	}
}

// TestRouteWaitsForRegistration: `broker ... &` then `route orders` used
// to fail when the read beat the registration. route now retries a miss
// for --wait; the broker registers only after the node saw the first miss.
func TestRouteWaitsForRegistration(t *testing.T) {
	dir := t.TempDir()
	n, err := node.New(node.Config{Addr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: dir, WarmUp: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	go n.Serve()
	defer n.Shutdown(context.Background())
	addr := n.Addr().String()
	env := []string{"EDGEREG_NODES=" + addr, "EDGEREG_DATA=" + dir}
	wait := startRoute(t, env, "route", "orders", "--wait", "20s")
	misses := func() bool {
		resp, err := http.Get("http://" + n.AdminAddr().String() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), `edgereg_route_reads_total{result="not_found"} `) && !strings.HasSuffix(sc.Text(), " 0") {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(15 * time.Second); !misses(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("route never asked the node")
		}
	}
	registerBroker(t, addr, dir, &wire.Register{Cluster: "DefaultCluster", BrokerName: "broker-a", Addr: "10.0.0.1:10911",
		Topics: []wire.TopicConfig{{Name: "orders", ReadQueues: 8, WriteQueues: 8, Perm: 6}}})
	out, stderr, code := wait()
	if code != 0 || !strings.Contains(out, "broker-a") {
		t.Fatalf("route after a late registration: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// TestRouteHonoursNodeSources: without --watch, route used to ignore
// --nodes-url (and -dns, -srv) and read --nodes.
func TestRouteHonoursNodeSources(t *testing.T) {
	addr, dir := cliNode(t)
	registerBroker(t, addr, dir, &wire.Register{Cluster: "DefaultCluster", BrokerName: "broker-a", Addr: "10.0.0.1:10911",
		Topics: []wire.TopicConfig{{Name: "orders", ReadQueues: 8, WriteQueues: 8, Perm: 6}}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, addr) }))
	defer srv.Close()
	dead := freeUDPAddr(t)
	out, stderr, code := run(t, []string{"EDGEREG_DATA=" + dir}, "--nodes", dead, "--timeout", "5s", "route", "orders", "--nodes-url", srv.URL)
	if code != 0 || !strings.Contains(out, "broker-a") {
		t.Fatalf("route --nodes-url: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	_, stderr, code = run(t, []string{"EDGEREG_DATA=" + dir}, "--timeout", "5s", "route", "orders", "--nodes-dns", "localhost:"+strings.Split(addr, ":")[1])
	if code != 0 {
		t.Errorf("route --nodes-dns: exit %d: %s", code, stderr)
	}
}

// TestCompletion: flag values and topic names complete.
func TestCompletion(t *testing.T) {
	addr, dir := cliNode(t)
	registerBroker(t, addr, dir, &wire.Register{Cluster: "DefaultCluster", BrokerName: "broker-a", Addr: "10.0.0.1:10911",
		Topics: []wire.TopicConfig{{Name: "orders", ReadQueues: 8, WriteQueues: 8, Perm: 6}, {Name: "payments", ReadQueues: 8, WriteQueues: 8, Perm: 6}}})
	env := []string{"EDGEREG_NODES=" + addr, "EDGEREG_DATA=" + dir}
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"clusters", "-o", ""}, []string{"table", "json"}},
		{[]string{"topics", "--kind", ""}, []string{"all", "system", "unit-sub-only"}},
		{[]string{"policy", "push", "x.wasm", "--hook", ""}, []string{"route", "expiry", "confirm"}},
		{[]string{"route", "or"}, []string{"orders"}},
		{[]string{"topic", "delete", ""}, []string{"orders", "payments"}},
	}
	for _, tc := range cases {
		out, stderr, code := run(t, env, append([]string{"__complete"}, tc.args...)...)
		if code != 0 {
			t.Errorf("complete %v: exit %d: %s", tc.args, code, stderr)
		}
		lines := strings.Split(out, "\n")
		for _, w := range tc.want {
			found := false
			for _, l := range lines {
				found = found || strings.SplitN(l, "\t", 2)[0] == w
			}
			if !found {
				t.Errorf("complete %v: no %q in\n%s", tc.args, w, out)
			}
		}
		if strings.Contains(strings.Join(tc.args, " "), "route or") && strings.Contains(out, "payments") {
			t.Errorf("complete route or: offers payments:\n%s", out)
		}
	}
}

// TestWatchJSONIsSnakeCase: route --watch -o json prints one JSON object
// per change with the names route -o json uses.
func TestWatchJSONIsSnakeCase(t *testing.T) {
	addr, dir := cliNode(t)
	registerBroker(t, addr, dir, &wire.Register{Cluster: "DefaultCluster", BrokerName: "broker-a", Addr: "10.0.0.1:10911",
		Topics: []wire.TopicConfig{{Name: "orders", ReadQueues: 8, WriteQueues: 8, Perm: 6}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "route", "--watch", "orders", "-o", "json")
	cmd.Env = append(os.Environ(), "EDGEREG_NODES="+addr, "EDGEREG_DATA="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("route --watch printed nothing: %v", err)
	}
	checkSnakeCase(t, "route --watch -o json", line)
	if !strings.Contains(line, `"broker_groups"`) {
		t.Errorf("watch line lacks the route: %s", line)
	}
}

// timeKeys are the keys of -o json and /status.json that hold a time: each
// must be an RFC 3339 string.
var timeKeys = map[string]bool{"started": true, "now": true, "deadline": true, "last_heartbeat": true,
	"activated_at": true, "time": true, "timestamp": true}

// jsonKinds maps every key of a JSON document, at any depth, to the JSON
// kinds its values have ("string", "number", "bool", "array", "object").
func jsonKinds(t *testing.T, where, doc string) map[string]map[string]bool {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", where, err, doc)
	}
	kinds := map[string]map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if kinds[k] == nil {
					kinds[k] = map[string]bool{}
				}
				kinds[k][jsonKind(x)] = true
				if timeKeys[k] {
					if s, ok := x.(string); !ok {
						t.Errorf("%s: %s = %v (%T): a time must be an RFC 3339 string", where, k, x, x)
					} else if _, err := time.Parse(time.RFC3339, s); err != nil {
						t.Errorf("%s: %s = %q: not RFC 3339", where, k, s)
					}
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return kinds
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "null"
}

// TestJSONOfMultiNodeCommands: the commands added with issue 15 (status,
// ping, --all-nodes, the merged route) follow -o json's conventions:
// snake_case keys, RFC 3339 times, and the names of a node's /status.json,
// where a key means the same (a key both use holds the same kind of value:
// "topics" is a list in /status.json, so a count is "topic_count").
func TestJSONOfMultiNodeCommands(t *testing.T) {
	dir := t.TempDir()
	n, err := node.New(node.Config{Addr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DataDir: dir, WarmUp: -1,
		PolicyCallTimeout: testPolicyCallTimeout, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	go n.Serve()
	defer n.Shutdown(context.Background())
	addr1 := n.Addr().String()
	addr2 := cliNodeSharingCA(t, dir)
	registerBroker(t, addr1, dir, brokerReg("broker-a", "10.0.0.1:10911", "orders"))
	registerBroker(t, addr2, dir, brokerReg("broker-a", "10.0.0.1:10911", "orders"))
	registerBroker(t, addr1, dir, brokerReg("broker-b", "10.0.0.2:10911", "pay"))
	module := filepath.Join("..", "..", "testdata", "wasm", "jitter-threshold.wasm")
	env := []string{"EDGEREG_DATA=" + dir, "EDGEREG_NODES=" + addr1 + "," + addr2}
	if out, errOut, code := run(t, env, "policy", "push", module, "--hook", "expiry", "--nodes", addr1); code != 0 {
		t.Fatalf("policy push: %d\n%s%s", code, out, errOut)
	}

	resp, err := http.Get("http://" + n.StatusAddr().String() + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	statusKinds := jsonKinds(t, "/status.json", string(page))

	for _, args := range [][]string{
		{"status"}, {"ping", "--count", "1"}, {"version"},
		{"clusters", "--all-nodes"}, {"leases", "--all-nodes"}, {"topics", "--all-nodes"},
		{"route", "orders", "pay"},
	} {
		where := strings.Join(args, " ") + " -o json"
		out, stderr, code := run(t, env, append(args, "-o", "json")...)
		if code != 0 {
			t.Errorf("%s: exit %d: %s", where, code, stderr)
			continue
		}
		checkSnakeCase(t, where, out)
		for k, kinds := range jsonKinds(t, where, out) {
			if k == "value" || statusKinds[k] == nil { // --all-nodes' value is the command's own answer
				continue
			}
			for kind := range kinds {
				if kind != "null" && !statusKinds[k][kind] {
					t.Errorf("%s: %q is a %s; in /status.json it is a %v", where, k, kind, slices.Collect(maps.Keys(statusKinds[k])))
				}
			}
		}
	}

	// The facts status shows are named as /status.json names them.
	out, _, _ := run(t, env, "status", "-o", "json")
	var st struct {
		Nodes []map[string]any `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Nodes) != 2 {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	for _, k := range []string{"node_id", "version", "started", "warming_up", "lease_count", "topic_count", "connections", "policies"} {
		if _, ok := st.Nodes[0][k]; !ok {
			t.Errorf("status -o json lacks %q: %v", k, st.Nodes[0])
		}
	}
}

// TestUnknownSubcommandIsUsage: `edgereg kv frob` (and the same under
// perm, policy, cert, topic and completion: `completion tcsh`) printed the
// group's help and exited 0, so a script's typo passed as a success. It is
// a usage error (exit 2) with a one-line message; the group alone still
// shows its help.
func TestUnknownSubcommandIsUsage(t *testing.T) {
	for _, args := range [][]string{{"kv", "frob"}, {"perm", "frob", "broker-a"}, {"policy", "frob"},
		{"cert", "frob"}, {"topic", "frob"}, {"completion", "tcsh"}} {
		stdout, stderr, code := run(t, nil, args...)
		if code != exitUsage || !strings.HasPrefix(stderr, "edgereg: ") || strings.Count(stderr, "\n") != 1 ||
			!strings.Contains(stderr, `unknown command "`+args[1]+`"`) || stdout != "" {
			t.Errorf("edgereg %s: exit %d, stdout %q, stderr %q; want exit 2 and one line naming the unknown command",
				strings.Join(args, " "), code, stdout, stderr)
		}
	}
	if out, _, code := run(t, nil, "kv"); code != 0 || !strings.Contains(out, "Available Commands") {
		t.Errorf("edgereg kv: exit %d, %q; want its help", code, out)
	}
}
