// Package nodetest runs real edgereg nodes on loopback for tests of the
// parties that talk to them: one test CA shared by every node, so a
// credential is accepted by all of them, and nodes that can be stopped and
// restarted on the same address and data directory, as a real restart
// would.
package nodetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire/pki"
)

// LogBuffer is a logger's output, written by the goroutines under test
// while the test reads it.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger discards logs unless EDGEREG_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("EDGEREG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// CA is one certificate authority for every node of a test.
type CA struct {
	local *pki.Local
}

// NewCA creates a CA in a temporary directory.
func NewCA(t testing.TB) *CA {
	t.Helper()
	local, err := pki.EnsureLocal(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{local: local}
}

// Local returns the CA itself, to issue credentials of any shape.
func (ca *CA) Local() *pki.Local { return ca.local }

// Seed puts the CA in a node's data directory; the node then issues its own
// certificate from it.
func (ca *CA) Seed(t testing.TB, dataDir string) {
	t.Helper()
	dst := pki.TLSDir(dataDir)
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.crt", "ca.key"} {
		b, err := os.ReadFile(filepath.Join(ca.local.Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TLS returns a client TLS config with a fresh credential of role.
func (ca *CA) TLS(t testing.TB, role pki.Role, name string, groups ...string) *tls.Config {
	t.Helper()
	certPEM, keyPEM, err := ca.local.Issue(role, name, groups, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pki.ClientConfig(&cert, ca.local.CAPool, "localhost")
}

// Node is a real node on a loopback port.
type Node struct {
	t    testing.TB
	dir  string
	edit func(*node.Config)

	mu   sync.Mutex
	addr string
	n    *node.Node
	done chan error
}

// Start starts a node on 127.0.0.1 with a fresh data directory holding the
// CA; edit may change its config (warm-up is off by default). The node is
// stopped when the test ends.
func Start(t testing.TB, ca *CA, edit func(*node.Config)) *Node {
	t.Helper()
	tn := &Node{t: t, dir: t.TempDir(), addr: "127.0.0.1:0", edit: edit}
	ca.Seed(t, tn.dir)
	tn.Start()
	t.Cleanup(tn.Stop)
	return tn
}

// PolicyCallTimeout is a test node's policy call deadline in place of the
// node's 20 ms: under -race on a loaded 2-core machine a goroutine can wait
// longer than that for a core, and a fast module's dry run at push was
// refused for its deadline. A test about the deadline sets its own.
const PolicyCallTimeout = 5 * time.Second

// Start starts the node again after Stop, on the same address and data
// directory.
func (tn *Node) Start() {
	tn.t.Helper()
	tn.mu.Lock()
	addr := tn.addr
	tn.mu.Unlock()
	cfg := node.Config{Addr: addr, AdminAddr: node.AdminOff, DataDir: tn.dir, WarmUp: -1, Logger: Logger(),
		PolicyCallTimeout: PolicyCallTimeout}
	if tn.edit != nil {
		tn.edit(&cfg)
	}
	n, err := node.New(cfg)
	if err != nil {
		tn.t.Fatalf("start node: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- n.Serve() }()
	tn.mu.Lock()
	tn.n, tn.done, tn.addr = n, done, n.Addr().String()
	tn.mu.Unlock()
}

// Stop shuts the node down gracefully; Start starts it again.
func (tn *Node) Stop() {
	tn.mu.Lock()
	n, done := tn.n, tn.done
	tn.n = nil
	tn.mu.Unlock()
	if n == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil && !errors.Is(err, node.ErrClosed) {
		tn.t.Errorf("shutdown node: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, node.ErrClosed) {
			tn.t.Errorf("Serve returned %v", err)
		}
	case <-time.After(10 * time.Second):
		tn.t.Error("Serve did not return after Shutdown")
	}
}

// Restart stops the node and starts a new one on the same address and data
// directory: its route tables are empty, as after a real restart.
func (tn *Node) Restart() {
	tn.t.Helper()
	tn.Stop()
	tn.Start()
}

// Node returns the running node, or nil while it is stopped.
func (tn *Node) Node() *node.Node {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.n
}

// Addr returns the node's address, which stays the same across restarts.
func (tn *Node) Addr() string {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.addr
}

// Dir returns the node's data directory.
func (tn *Node) Dir() string { return tn.dir }

// WaitFor polls cond until it holds, failing the test after a generous
// deadline. It never asserts on speed.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Context returns a context that ends with the test, after 30 s at most.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
