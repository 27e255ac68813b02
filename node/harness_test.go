package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// testNode is a node on a loopback port with its own data directory.
type testNode struct {
	*Node
	t     testing.TB
	dir   string
	local *pki.Local
	done  chan error
	once  sync.Once
	// crashed is set when the test killed the node's socket, so Serve is
	// expected to fail.
	crashed bool
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startNode starts a node on 127.0.0.1 with a random port; edit may adjust
// the config. The node is shut down when the test ends.
// testPolicyCallTimeout replaces the node's 20 ms policy call deadline in
// test nodes: under -race on a loaded 2-core machine a goroutine may wait
// longer than 20 ms for a core, so a dry run at push missed it and a fast
// module was refused ("policy call exceeded its deadline"; seen in
// TestPolicyChangesLoggedOnceWithTheOperator), and real calls fell back.
// A test about the deadline itself sets PolicyCallTimeout in its edit.
const testPolicyCallTimeout = 5 * time.Second

func startNode(t testing.TB, edit func(*Config)) *testNode {
	t.Helper()
	dir := t.TempDir()
	return startNodeIn(t, dir, "127.0.0.1:0", edit)
}

func startNodeIn(t testing.TB, dir, addr string, edit func(*Config)) *testNode {
	t.Helper()
	cfg := Config{Addr: addr, AdminAddr: AdminOff, DataDir: dir, Logger: quietLogger(), WarmUp: -1,
		PolicyCacheDir: sharedPolicyCache, PolicyCallTimeout: testPolicyCallTimeout}
	if edit != nil {
		edit(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	local, err := pki.EnsureLocal(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{Node: n, t: t, dir: dir, local: local, done: make(chan error, 1)}
	go func() { tn.done <- n.Serve() }()
	t.Cleanup(tn.stop)
	return tn
}

func (tn *testNode) stop() { tn.once.Do(tn.shutdown) }

func (tn *testNode) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tn.Shutdown(ctx); err != nil && !errors.Is(err, ErrClosed) {
		tn.t.Errorf("shutdown: %v", err)
	}
	select {
	case err := <-tn.done:
		if !errors.Is(err, ErrClosed) && !tn.crashed {
			tn.t.Errorf("Serve returned %v", err)
		}
	case <-time.After(5 * time.Second):
		tn.t.Error("Serve did not return after Shutdown")
	}
}

// tlsFor returns a client TLS config with a fresh credential of the role.
func (tn *testNode) tlsFor(role pki.Role, name string, groups ...string) *tls.Config {
	tn.t.Helper()
	certPEM, keyPEM, err := tn.local.Issue(role, name, groups, time.Hour)
	if err != nil {
		tn.t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		tn.t.Fatal(err)
	}
	return pki.ClientConfig(&cert, tn.local.CAPool, "localhost")
}

// dial connects with a credential of the role; closed when the test ends.
func (tn *testNode) dial(role pki.Role, groups ...string) *client.Conn {
	tn.t.Helper()
	return tn.dialTLS(tn.tlsFor(role, "test-"+string(role), groups...))
}

func (tn *testNode) dialTLS(conf *tls.Config) *client.Conn {
	tn.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: conf})
	if err != nil {
		tn.t.Fatalf("dial: %v", err)
	}
	tn.t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func registration(cluster, group string, id int64, addr string, topics ...string) *wire.Register {
	r := &wire.Register{Cluster: cluster, BrokerName: group, BrokerID: id, Addr: addr,
		DataVersion: wire.DataVersion{Counter: 1}}
	for _, t := range topics {
		r.Topics = append(r.Topics, wire.TopicConfig{Name: t, ReadQueues: 8, WriteQueues: 8, Perm: wire.PermRead | wire.PermWrite})
	}
	return r
}

// servedLeaf dials tn afresh, with a full handshake (no session cache),
// as the holder of cert trusting pool, pings it and returns the
// certificate the node served.
func (tn *testNode) servedLeaf(cert *tls.Certificate, pool *x509.CertPool) (*x509.Certificate, error) {
	var mu sync.Mutex
	var leaf *x509.Certificate
	conf := pki.ClientConfig(cert, pool, "")
	conf.ClientSessionCache = nil
	conf.VerifyConnection = func(cs tls.ConnectionState) error {
		mu.Lock()
		leaf = cs.PeerCertificates[0]
		mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: conf})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Ping(ctx); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	return leaf, nil
}
