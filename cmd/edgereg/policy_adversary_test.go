package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestPolicyFilesReadCapped: `policy push` and `policy test` read the
// module (and --input) file the operator names before they connect: a
// FIFO or a device is refused rather than read until it ends (a FIFO
// with no writer blocked the CLI forever, /dev/zero would fill its
// memory), and a module over the 4 MiB cap is refused without reading
// or sending it all.
func TestPolicyFilesReadCapped(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "module.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	big := filepath.Join(dir, "big.wasm")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 5<<20); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small.wasm")
	if err := os.WriteFile(small, []byte("\x00asm\x01\x00\x00\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing listens on the port: a CLI that got past reading the
	// files would fail to connect instead.
	nodes := []string{"--data", dir, "--nodes", "127.0.0.1:1"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"policy", "push", fifo, "--hook", "route"}, "not a regular file"},
		{[]string{"policy", "test", fifo, "--hook", "route"}, "not a regular file"},
		{[]string{"policy", "push", big, "--hook", "route"}, "over"},
		{[]string{"policy", "test", small, "--hook", "route", "--input", fifo}, "not a regular file"},
	} {
		_, stderr, code := run(t, nil, append(nodes, c.args...)...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 naming %q", c.args, code, stderr, c.want)
		}
	}
}

// TestPolicyTestRouteJSONAsABISays runs `policy test --input` on a route
// input written with the JSON names wasm/ABI.md gives, groups out of
// order, through zone-affinity: a client of zone-1 sees its group and the
// one without a master, in broker-name order.
func TestPolicyTestRouteJSONAsABISays(t *testing.T) {
	addr, dir := cliNode(t)
	env := []string{"EDGEREG_NODES=" + addr, "EDGEREG_DATA=" + dir, "EDGEREG_TIMEOUT=120s"}
	module := filepath.Join("..", "..", "testdata", "wasm", "zone-affinity.wasm")
	input := filepath.Join(t.TempDir(), "route.json")
	os.WriteFile(input, []byte(`{"client": {"addr": "10.9.9.9", "zone": "zone-1", "labels": {"app": "x"}},
  "topic": "t", "now_ms": 1, "rand": 2,
  "route": {
    "queues": [
      {"broker_name": "c", "read_queues": 4, "write_queues": 0, "perm": 4, "sys_flag": 0},
      {"broker_name": "b", "read_queues": 4, "write_queues": 4, "perm": 6, "sys_flag": 0},
      {"broker_name": "a", "read_queues": 4, "write_queues": 4, "perm": 6, "sys_flag": 0}],
    "brokers": [
      {"cluster": "C", "name": "c", "zone": "zone-2", "addresses": {"1": "10.0.3.2:1"}},
      {"cluster": "C", "name": "b", "zone": "zone-2", "addresses": {"0": "10.0.2.1:1"}},
      {"cluster": "C", "name": "a", "zone": "zone-1", "addresses": {"0": "10.0.1.1:1"}}]}}`), 0o600)
	out, stderr, code := run(t, env, "-o", "json", "policy", "test", module, "--hook", "route", "--input", input)
	if code != 0 {
		t.Fatalf("policy test: exit %d: %s", code, stderr)
	}
	a, c, b := strings.Index(out, `"name": "a"`), strings.Index(out, `"name": "c"`), strings.Index(out, `"name": "b"`)
	if a < 0 || c < 0 || b >= 0 || a > c {
		t.Fatalf("zone-1 client sees, in order: %s\nwant groups a then c, not b", out)
	}
}
