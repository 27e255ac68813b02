package broker_test

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire/pki"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testLogger discards logs unless EDGEREG_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("EDGEREG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testCA is one certificate authority shared by every node of a test, so
// one broker or client credential is accepted by all of them.
type testCA struct {
	dir   string
	local *pki.Local
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	dir := t.TempDir()
	local, err := pki.EnsureLocal(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{dir: dir, local: local}
}

// seed puts the CA in a node's data directory; the node then issues its
// own certificate from it.
func (ca *testCA) seed(t testing.TB, dataDir string) {
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

// tlsFor returns a client TLS config with a fresh credential of role.
func (ca *testCA) tlsFor(t testing.TB, role pki.Role, name string) *tls.Config {
	t.Helper()
	certPEM, keyPEM, err := ca.local.Issue(role, name, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pki.ClientConfig(&cert, ca.local.CAPool, "localhost")
}

// testNode is a real node on a loopback port that can be restarted on the
// same address and data directory.
type testNode struct {
	t    testing.TB
	dir  string
	addr string
	edit func(*node.Config)

	mu   sync.Mutex
	n    *node.Node
	done chan error
}

func startNode(t testing.TB, ca *testCA, edit func(*node.Config)) *testNode {
	t.Helper()
	tn := &testNode{t: t, dir: t.TempDir(), addr: "127.0.0.1:0", edit: edit}
	ca.seed(t, tn.dir)
	tn.start()
	t.Cleanup(tn.stop)
	return tn
}

func (tn *testNode) start() {
	tn.t.Helper()
	cfg := node.Config{Addr: tn.addr, AdminAddr: node.AdminOff, DataDir: tn.dir, WarmUp: -1, Logger: testLogger()}
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

// stop shuts the node down; it may be started again with start.
func (tn *testNode) stop() {
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

// restart shuts the node down and starts a new one on the same address and
// data directory: its route tables are empty, as after a real restart.
func (tn *testNode) restart() {
	tn.t.Helper()
	tn.stop()
	tn.start()
}

func (tn *testNode) node() *node.Node {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.n
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline. It never asserts on speed.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
