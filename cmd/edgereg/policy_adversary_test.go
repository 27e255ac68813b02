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
