package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// cliNodeSharingCA starts a node whose data directory holds the CA of
// caDir, so the operator credential of caDir works on it too.
func cliNodeSharingCA(t *testing.T, caDir string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(pki.TLSDir(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.crt", "ca.key"} {
		b, err := os.ReadFile(filepath.Join(pki.TLSDir(caDir), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pki.TLSDir(dir), f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := node.New(node.Config{Addr: "127.0.0.1:0", AdminAddr: node.AdminOff, DataDir: dir, WarmUp: -1,
		PolicyCallTimeout: testPolicyCallTimeout, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	go n.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n.Addr().String()
}

func brokerReg(name, addr, topic string) *wire.Register {
	return &wire.Register{Cluster: "DefaultCluster", BrokerName: name, Addr: addr, DataVersion: wire.DataVersion{Counter: 1},
		Topics: []wire.TopicConfig{{Name: topic, ReadQueues: 4, WriteQueues: 4, Perm: 6}}}
}

// TestCLIStatusShowsDrift: two nodes with different policies and different
// lease sets; `edgereg status` lists both and flags the policy, the lease
// count and the broker one of them lacks; ping and --all-nodes agree.
func TestCLIStatusShowsDrift(t *testing.T) {
	addr1, dir := cliNode(t)
	addr2 := cliNodeSharingCA(t, dir)
	registerBroker(t, addr1, dir, brokerReg("broker-a", "10.0.0.1:10911", "orders"))
	registerBroker(t, addr2, dir, brokerReg("broker-a", "10.0.0.1:10911", "orders"))
	registerBroker(t, addr1, dir, brokerReg("broker-b", "10.0.0.2:10911", "pay")) // node 2 never hears of it
	env := []string{"EDGEREG_DATA=" + dir}
	module := filepath.Join("..", "..", "testdata", "wasm", "jitter-threshold.wasm")
	if out, errOut, code := run(t, env, "policy", "push", module, "--hook", "expiry", "--nodes", addr1); code != 0 {
		t.Fatalf("policy push on node 1: %d\n%s%s", code, out, errOut)
	}
	both := "--nodes=" + addr1 + "," + addr2

	out, errOut, code := run(t, env, "status", both)
	t.Logf("edgereg status:\n%s", out)
	if code != 0 {
		t.Fatalf("status exit %d: %s", code, errOut)
	}
	for _, want := range []string{addr1, addr2, "ready", "DRIFT", "policy", "hook expiry", "built-in on " + addr2,
		"lease_count", addr1 + " holds 2 leases, " + addr2 + " holds 1",
		"broker", "DefaultCluster/broker-b/0 10.0.0.2:10911: lease on " + addr1 + ", none on " + addr2} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q", want)
		}
	}
	out, _, code = run(t, env, "status", both, "-o", "json")
	var st statusOut
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 {
		t.Fatalf("status -o json: %v, exit %d\n%s", err, code, out)
	}
	kinds := map[string]int{}
	for _, d := range st.Drift {
		kinds[d.Kind]++
	}
	byAddr := map[string]nodeStatus{}
	for _, n := range st.Nodes {
		byAddr[n.Node] = n
	}
	if len(st.Nodes) != 2 || byAddr[addr1].Leases != 2 || byAddr[addr2].Leases != 1 || len(byAddr[addr1].Policies) != 1 || byAddr[addr1].Policies[0].Hook != "expiry" || byAddr[addr1].Policies[0].Hash == "" ||
		kinds["policy"] != 1 || kinds["lease_count"] != 1 || kinds["broker"] != 1 {
		t.Errorf("status json: %+v", st)
	}
	// Within tolerance, lease counts are no drift.
	if out, _, _ := run(t, env, "status", both, "--lease-tolerance", "1"); strings.Contains(out, "lease_count") {
		t.Errorf("lease counts 2 and 1 flagged with tolerance 1:\n%s", out)
	}

	out, errOut, code = run(t, env, "ping", both, "--count", "2")
	if code != 0 || !strings.Contains(out, addr1) || !strings.Contains(out, addr2) {
		t.Errorf("ping: exit %d\n%s%s", code, out, errOut)
	}

	out, _, code = run(t, env, "leases", both, "--all-nodes")
	if code != 0 || !strings.Contains(out, "== node "+addr2) || !strings.Contains(out, "broker DefaultCluster/broker-b/0 10.0.0.2:10911: only on "+addr1) {
		t.Errorf("leases --all-nodes: exit %d\n%s", code, out)
	}
	out, _, _ = run(t, env, "topics", both, "--all-nodes")
	if !strings.Contains(out, "topic pay: only on "+addr1) {
		t.Errorf("topics --all-nodes:\n%s", out)
	}
	_, errOut, code = run(t, env, "clusters", "--nodes", addr2)
	if code != 0 || !strings.Contains(errOut, "answered by "+addr2) {
		t.Errorf("clusters does not say which node answered: exit %d, stderr %q", code, errOut)
	}
	// A node that does not answer: listed, and the exit status says so.
	_, _, code = run(t, env, "status", both+","+freeUDPAddr(t), "--timeout", "3s")
	if code != 1 {
		t.Errorf("status with a dead node: exit %d, want 1", code)
	}
}
