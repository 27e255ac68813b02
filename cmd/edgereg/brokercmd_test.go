package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/pki"
)

// TestBrokerAgentRefusedForItsGroupExits runs the broker agent with a
// certificate for group broker-a as group broker-b: the node refuses it
// (not authorized), and the agent exits non-zero with the node's message
// instead of running on and reporting a clean unregistration.
func TestBrokerAgentRefusedForItsGroupExits(t *testing.T) {
	addr, dir := cliNode(t)
	ca, err := pki.EnsureLocal(dir, nil) // the node's own CA
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.RoleBroker, "broker-a", []string{"broker-a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	creds := t.TempDir()
	certFile, keyFile := filepath.Join(creds, "broker.crt"), filepath.Join(creds, "broker.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, nil, "broker", "--nodes", addr, "--cert", certFile, "--key", keyFile,
		"--ca", filepath.Join(ca.Dir, "ca.crt"), "--name", "broker-b", "--addr", "10.0.0.2:10911", "--topics", "orders")
	if code == 0 || code == -1 {
		t.Fatalf("the agent refused for its group exited with %d (-1: still running when killed), want an error exit; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"not authorized", `broker group \"broker-b\"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	t.Logf("agent exited with %d:\n%s", code, stderr)
	for _, bad := range []string{"broker agent stopped: unregistered", `"msg":"broker unregistered"`} {
		if strings.Contains(stderr, bad) {
			t.Errorf("the refused agent reports a clean unregistration (%s):\n%s", bad, stderr)
		}
	}
}
