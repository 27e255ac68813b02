package node

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/ratelog"
)

// requestKinds is one valid request of every kind, for the authorization
// table. The node state makes each succeed for an operator.
func requestKinds(epoch uint64) map[wire.Type]any {
	return map[wire.Type]any{
		wire.TypeRegister:          registration("c1", "b1", 0, "10.0.0.1:1", "t"),
		wire.TypeUpdateTopics:      &wire.UpdateTopics{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: epoch, Upsert: []wire.TopicConfig{{Name: "t2"}}},
		wire.TypeHeartbeat:         &wire.Heartbeat{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: epoch},
		wire.TypeUnregister:        &wire.Unregister{Cluster: "c1", Addr: "10.0.0.9:1", Epoch: 1},
		wire.TypeGetRoutes:         &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "t"}}},
		wire.TypeClusterInfo:       nil,
		wire.TypeTopics:            &wire.TopicsQuery{},
		wire.TypeBrokerMemberGroup: &wire.MemberGroupQuery{Cluster: "c1", BrokerName: "b1"},
		wire.TypeWatch:             &wire.Watch{Topics: []wire.TopicVersion{{Topic: "t"}}},
		wire.TypeUnwatch:           &wire.Unwatch{Topics: []string{"t"}},
		wire.TypePing:              nil,
		wire.TypeDeleteTopic:       &wire.DeleteTopic{Topic: "nope"},
		wire.TypeWipeWritePerm:     &wire.PermRequest{BrokerName: "nope"},
		wire.TypeAddWritePerm:      &wire.PermRequest{BrokerName: "nope"},
		wire.TypeKVPut:             &wire.KVRequest{Namespace: "ns", Key: "k", Value: "v"},
		wire.TypeKVGet:             &wire.KVRequest{Namespace: "ns", Key: "k"},
		wire.TypeKVDelete:          &wire.KVRequest{Namespace: "ns", Key: "nope"},
		wire.TypeKVList:            &wire.KVRequest{Namespace: "ns"},
		wire.TypeLeases:            nil,
		wire.TypePolicyPush:        &wire.PolicyPush{Hook: "route", Module: []byte("not wasm")},
		wire.TypePolicyList:        nil,
		wire.TypePolicyRollback:    &wire.PolicyHook{Hook: "route"},
		wire.TypePolicyRemove:      &wire.PolicyHook{Hook: "confirm"},
		wire.TypePolicyTest:        &wire.PolicyTest{Hook: "route", Module: []byte("not wasm")},
	}
}

// TestAuthorizationTable sends every request kind with every role and
// checks allow or deny against the documented table.
func TestAuthorizationTable(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.AllowAnonymousClients = true })
	ctx := ctxT(t)
	op := tn.dial(pki.RoleOperator)
	ack, err := op.Register(ctx, registration("c1", "b1", 0, "10.0.0.1:1", "t"))
	if err != nil {
		t.Fatal(err)
	}
	if err := op.KVPut(ctx, "ns", "k", "v"); err != nil {
		t.Fatal(err)
	}
	roles := map[string]*client.Conn{
		"operator":  op,
		"broker":    tn.dial(pki.RoleBroker),
		"client":    tn.dial(pki.RoleClient),
		"node":      tn.dial(pki.RoleNode),
		"anonymous": tn.dialTLS(pki.ClientConfig(nil, tn.local.CAPool, "localhost")),
	}
	all := func(ts ...wire.Type) map[wire.Type]bool { return setOf(ts) }
	queries := []wire.Type{wire.TypeGetRoutes, wire.TypeClusterInfo, wire.TypeTopics, wire.TypeBrokerMemberGroup,
		wire.TypeWatch, wire.TypeUnwatch, wire.TypePing}
	allow := map[string]map[wire.Type]bool{
		"operator":  all(typesOf(requestKinds(0))...),
		"broker":    all(append(queries, wire.TypeRegister, wire.TypeUpdateTopics, wire.TypeHeartbeat, wire.TypeUnregister)...),
		"client":    all(queries...),
		"node":      all(queries...),
		"anonymous": all(wire.TypeGetRoutes, wire.TypeWatch, wire.TypeUnwatch, wire.TypePing),
	}
	for role, c := range roles {
		for typ, req := range requestKinds(ack.Lease.Epoch) {
			err := c.CallOnce(ctx, typ, req, nil)
			denied := errors.Is(err, wire.ErrNotAuthorized)
			if want := allow[role][typ]; want == denied {
				t.Errorf("role %s, %s: allowed=%v, got err %v", role, typ, want, err)
			}
			if denied && !strings.Contains(err.Error(), role) {
				t.Errorf("denial does not name the role: %v", err)
			}
			if typ == wire.TypeRegister && !denied {
				// Re-registering refreshed the epoch; follow it.
				l, _ := tn.Registry().Lease("c1", "10.0.0.1:1")
				ack.Lease.Epoch = l.Epoch
			}
		}
	}
	// A refused request changed nothing.
	if v, err := op.KVGet(ctx, "ns", "k"); err != nil || v != "v" {
		t.Fatalf("kv after refused writes: %q %v", v, err)
	}
	// Every denial is counted by role and kind.
	for role := range roles {
		for typ := range requestKinds(0) {
			want := 1.0
			if allow[role][typ] {
				want = 0
			}
			if got := metricValue(t, tn, "edgereg_requests_denied_total", "role="+role, "kind="+typ.String()); got != want {
				t.Errorf("edgereg_requests_denied_total{role=%s,kind=%s} = %v, want %v", role, typ, got, want)
			}
		}
	}
}

func typesOf(m map[wire.Type]any) []wire.Type {
	out := make([]wire.Type, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	return out
}

func TestBrokerLimitedToItsGroups(t *testing.T) {
	tn := startNode(t, nil)
	ctx := ctxT(t)
	b := tn.dial(pki.RoleBroker, "group-a")
	if _, err := b.Register(ctx, registration("c1", "group-a", 0, "10.0.0.1:1", "t")); err != nil {
		t.Fatal(err)
	}
	_, err := b.Register(ctx, registration("c1", "group-b", 0, "10.0.0.2:1", "t"))
	if !errors.Is(err, wire.ErrNotAuthorized) || !strings.Contains(err.Error(), "group-b") {
		t.Fatalf("foreign group: %v", err)
	}
	// Another broker's lease can be neither renewed nor removed.
	other := tn.dial(pki.RoleBroker, "group-b")
	l, _ := tn.Registry().Lease("c1", "10.0.0.1:1")
	if err := other.Unregister(ctx, &wire.Unregister{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: l.Epoch}); !errors.Is(err, wire.ErrNotAuthorized) {
		t.Fatalf("unregister of another group: %v", err)
	}
	if _, ok := tn.Registry().Lease("c1", "10.0.0.1:1"); !ok {
		t.Fatal("a refused unregister removed the broker")
	}
	for _, kind := range []string{"register", "unregister"} {
		if n := metricValue(t, tn, "edgereg_requests_denied_total", "role=broker", "kind="+kind); n != 1 {
			t.Errorf("denied{role=broker,kind=%s} = %v, want 1", kind, n)
		}
	}
}

// TestRefusedCertificates: expired, revoked and foreign-CA certificates,
// and no certificate without --allow-anonymous-clients, cannot connect.
func TestRefusedCertificates(t *testing.T) {
	revocations := filepath.Join(t.TempDir(), "revoked.txt")
	dir := t.TempDir()
	local, err := pki.EnsureLocal(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	revokedPEM, revokedKey, _ := local.Issue(pki.RoleOperator, "revoked", nil, time.Hour)
	revoked, _ := tls.X509KeyPair(revokedPEM, revokedKey)
	leaf, _ := x509.ParseCertificate(revoked.Certificate[0])
	os.WriteFile(revocations, []byte(fmt.Sprintf("%x\n", leaf.SerialNumber)), 0o600)
	var logs syncBuffer
	tn := startNodeIn(t, dir, "127.0.0.1:0", func(c *Config) {
		c.RevocationFile = revocations
		logTo(&logs)(c)
	})

	foreignDir := t.TempDir()
	foreign, _ := pki.EnsureLocal(foreignDir, nil)
	fPEM, fKey, _ := foreign.Issue(pki.RoleOperator, "foreign", nil, time.Hour)
	fCert, _ := tls.X509KeyPair(fPEM, fKey)

	cases := map[string]*tls.Config{
		"expired":     pki.ClientConfig(ptr(expiredCert(t, dir)), tn.local.CAPool, "localhost"),
		"revoked":     pki.ClientConfig(&revoked, tn.local.CAPool, "localhost"),
		"foreign CA":  pki.ClientConfig(&fCert, tn.local.CAPool, "localhost"),
		"no cert":     pki.ClientConfig(nil, tn.local.CAPool, "localhost"),
		"no role SAN": pki.ClientConfig(ptr(noRoleCert(t, dir)), tn.local.CAPool, "localhost"),
	}
	for name, conf := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: conf})
			if err == nil {
				defer c.Close()
				_, err = c.Ping(ctx)
			}
			if err == nil {
				t.Fatal("the node accepted the credential")
			}
		})
	}
	// The node still serves good clients.
	if _, err := tn.dial(pki.RoleClient).Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// Refused handshakes and certificates are counted.
	if n := waitMetric(t, tn, 4, "edgereg_tls_handshake_failures_total"); n < 4 {
		t.Errorf("%v TLS handshake failures counted for expired, revoked, foreign-CA and missing certificates, want 4", n)
	}
	if n := waitMetric(t, tn, 1, "edgereg_connections_refused_total", "reason=no_identity"); n != 1 {
		t.Errorf("%v refusals counted for a certificate without a role, want 1", n)
	}
	// Each is logged with what is known of the peer: its address, and the
	// certificate once it was verified (revoked, no role).
	if ls := logs.lines("TLS handshake failed"); len(ls) < 4 || !slices.ContainsFunc(ls, func(l string) bool {
		return strings.Contains(l, `\"revoked\" serial`) && strings.Contains(l, "remote=127.0.0.1:")
	}) {
		t.Errorf("TLS failures logged as %q, want 4 lines, the revoked one naming the certificate", ls)
	}
	if ls := logs.lines("connection refused"); len(ls) != 1 || !strings.Contains(ls[0], `certificate \"test\"`) {
		t.Errorf("no-identity refusal logged as %q, want it to name the certificate", ls)
	}
}

func ptr[T any](v T) *T { return &v }

// expiredCert signs an operator certificate that expired an hour ago with
// the local CA in dir.
func expiredCert(t *testing.T, dir string) tls.Certificate {
	return signWithLocalCA(t, dir, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), "edgereg://role/operator")
}

// noRoleCert signs a valid certificate that carries no role.
func noRoleCert(t *testing.T, dir string) tls.Certificate {
	return signWithLocalCA(t, dir, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "")
}

func signWithLocalCA(t *testing.T, dir string, notBefore, notAfter time.Time, uri string) tls.Certificate {
	t.Helper()
	ca, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls", "ca.crt"), filepath.Join(dir, "tls", "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(ca.Certificate[0])
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "test"},
		NotBefore:    notBefore, NotAfter: notAfter,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}
	if uri != "" {
		u, _ := url.Parse(uri)
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestFloodsLeaveOthersServed: a flood of connections and streams from one
// host, a slowloris stream, garbage UDP and a wrong ALPN leave the node's
// memory bounded and other clients' reads working.
func TestFloodsLeaveOthersServed(t *testing.T) {
	tn := startNode(t, func(c *Config) {
		c.MaxConnsPerHost = 8
		c.MaxStreamsPerConn = 16
		c.ReadTimeout = 500 * time.Millisecond
	})
	ctx := ctxT(t)
	op := tn.dial(pki.RoleOperator)
	if _, err := op.Register(ctx, registration("c1", "b1", 0, "10.0.0.1:1", "t")); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	// Connection flood from one host with one certificate: beyond the
	// limit, each new connection replaces the flooder's own oldest one.
	conf := tn.tlsFor(pki.RoleClient, "flood")
	var conns []*quic.Conn
	for range 20 {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		qc, err := quic.DialAddr(dctx, tn.Addr().String(), conf, nil)
		cancel()
		if err == nil {
			conns = append(conns, qc)
		}
	}
	if n := waitMetric(t, tn, 12, "edgereg_connections_replaced_total"); n < 12 {
		t.Fatalf("20 connections of one certificate with a limit of 8: %v replaced, want 12 or more", n)
	}
	// Stream flood and slowloris on the accepted connections: every stream
	// sends half a frame and stalls.
	for _, qc := range conns {
		for range 40 {
			s, err := qc.OpenStream()
			if err != nil {
				break // the stream limit holds
			}
			s.Write([]byte{0, 0, 1, 0, 0xa1})
		}
	}
	// Garbage UDP and a wrong ALPN.
	udp, err := net.Dial("udp", tn.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		udp.Write([]byte(fmt.Sprintf("garbage %d %s", i, make([]byte, i%1200))))
	}
	udp.Close()
	bad := tn.tlsFor(pki.RoleClient, "alpn")
	bad.NextProtos = []string{"h3"}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if qc, err := quic.DialAddr(dctx, tn.Addr().String(), bad, nil); err == nil {
		qc.CloseWithError(0, "")
		t.Error("a handshake with ALPN h3 was accepted")
	}
	cancel()

	// Meanwhile the operator's connection (opened before the flood) reads.
	if _, _, err := op.Route(ctx, "t", wire.ClientAttrs{}); err != nil {
		t.Fatalf("route during the flood: %v", err)
	}
	// The slowloris streams are cut off by the read deadline (500 ms); the
	// wait is generous, it bounds a hang, not a speed.
	for deadline := time.Now().Add(30 * time.Second); tn.stats.streams.Load() > 8; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams still open long after the read deadline", tn.stats.streams.Load())
		}
	}
	for _, qc := range conns {
		qc.CloseWithError(0, "")
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 64<<20 {
		t.Errorf("heap grew by %d MiB under the flood", grown>>20)
	}
	if _, _, err := tn.dial(pki.RoleClient).Route(ctx, "t", wire.ClientAttrs{}); err != nil {
		t.Fatalf("route after the flood: %v", err)
	}
}

// TestNodeWithIssuedCertificate runs a node on credentials issued by
// `edgereg cert issue --role node` (as on another machine, or in
// Kubernetes) and reads through it with a client of the same CA.
func TestNodeWithIssuedCertificate(t *testing.T) {
	caDir := t.TempDir()
	ca, err := pki.EnsureLocal(caDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	creds := t.TempDir()
	if err := ca.IssueFiles(pki.RoleNode, "edgereg-0.edgereg", nil, time.Hour, creds); err != nil {
		t.Fatal(err)
	}
	tn := startNode(t, func(c *Config) {
		c.CertFile = filepath.Join(creds, "edgereg-0.edgereg.crt")
		c.KeyFile = filepath.Join(creds, "edgereg-0.edgereg.key")
		c.ClientCAFile = filepath.Join(creds, "ca.crt")
	})
	certPEM, keyPEM, err := ca.Issue(pki.RoleClient, "reader", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c := tn.dialTLS(pki.ClientConfig(&cert, ca.CAPool, ""))
	if _, err := c.Ping(ctxT(t)); err != nil {
		t.Fatalf("a client of the same CA cannot reach a node on issued credentials: %v", err)
	}
}

// TestBrokerCannotTakeOverAnotherGroupsAddress: a certificate limited to
// group A may not register A at the address group B holds a lease on. Before
// the fix it could, and B's own heartbeats were refused from then on.
func TestBrokerCannotTakeOverAnotherGroupsAddress(t *testing.T) {
	tn := startNode(t, nil)
	ctx := ctxT(t)
	b := tn.dial(pki.RoleBroker, "group-b")
	ack, err := b.Register(ctx, registration("c1", "group-b", 0, "10.0.0.2:1", "tb"))
	if err != nil {
		t.Fatal(err)
	}
	a := tn.dial(pki.RoleBroker, "group-a")
	_, err = a.Register(ctx, registration("c1", "group-a", 0, "10.0.0.2:1", "ta"))
	if !errors.Is(err, wire.ErrNotAuthorized) || !strings.Contains(err.Error(), "group-b") {
		t.Errorf("group-a at group-b's address: err = %v, want not authorized naming group-b", err)
	}
	if _, err := b.Heartbeat(ctx, &wire.Heartbeat{Cluster: "c1", Addr: "10.0.0.2:1", Epoch: ack.Lease.Epoch, DataVersion: wire.DataVersion{Counter: 1}}); err != nil {
		t.Errorf("group-b's heartbeat after the attempt: %v", err)
	}
	if _, err := tn.Registry().Route("ta"); err == nil {
		t.Error("the refused registration's topic is routed")
	}
	// A certificate for both groups may move the address; the old group
	// then loses it.
	both := tn.dial(pki.RoleBroker, "group-a", "group-b")
	if _, err := both.Register(ctx, registration("c1", "group-a", 0, "10.0.0.2:1", "ta")); err != nil {
		t.Fatalf("a certificate for both groups moving the address: %v", err)
	}
	if _, err := tn.Registry().Route("tb"); err == nil {
		t.Error("the old group's topic is still routed after its address moved")
	}
}

// TestEmptyBrokerNameIsBadRequest: an empty broker name is invalid (code
// 1), for a group-limited certificate too; it used to be "not authorized".
func TestEmptyBrokerNameIsBadRequest(t *testing.T) {
	tn := startNode(t, nil)
	for _, c := range []*client.Conn{tn.dial(pki.RoleBroker), tn.dial(pki.RoleBroker, "group-a")} {
		_, err := c.Register(ctxT(t), registration("c1", "", 0, "10.0.0.1:1", "t"))
		if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "broker name") {
			t.Errorf("empty broker name: err = %v, want code 1 naming the broker name", err)
		}
	}
}

// syncBuffer is a log sink tests can read while the node writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) lines(substr string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

func logTo(b *syncBuffer) func(*Config) {
	return func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(b, nil)) }
}

// TestChangesAreLoggedWithWhoMadeThem: topic deletes, permission changes
// and KV writes name the operator's certificate and address.
func TestChangesAreLoggedWithWhoMadeThem(t *testing.T) {
	var logs syncBuffer
	tn := startNode(t, logTo(&logs))
	ctx := ctxT(t)
	op := tn.dialTLS(tn.tlsFor(pki.RoleOperator, "alice"))
	if _, err := op.Register(ctx, registration("c1", "b1", 0, "10.0.0.1:1", "t", "u")); err != nil {
		t.Fatal(err)
	}
	steps := []error{
		op.KVPut(ctx, "ns", "k", "v"), op.KVDelete(ctx, "ns", "k"), op.DeleteTopic(ctx, "u"),
	}
	_, err := op.WipeWritePerm(ctx, "b1")
	steps = append(steps, err)
	for _, err := range steps {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, msg := range []string{"kv put", "kv deleted", "topic deleted", "write permission changed"} {
		ls := logs.lines(`msg="` + msg + `"`)
		if len(ls) != 1 || !strings.Contains(ls[0], "peer=alice") || !strings.Contains(ls[0], "peer_role=operator") || !strings.Contains(ls[0], "remote=127.0.0.1:") {
			t.Errorf("%q logged as %q, want one line naming operator alice and her address", msg, ls)
		}
	}
}

// TestDenialsLoggedRateLimited: a peer sending denied requests in a loop
// is logged with its identity, but only a burst of lines, not one each.
func TestDenialsLoggedRateLimited(t *testing.T) {
	var logs syncBuffer
	tn := startNode(t, logTo(&logs))
	ctx := ctxT(t)
	c := tn.dialTLS(tn.tlsFor(pki.RoleClient, "mallory"))
	const tries = 200
	start := time.Now()
	for range tries {
		if err := c.KVPut(ctx, "ns", "k", "v"); !errors.Is(err, wire.ErrNotAuthorized) {
			t.Fatalf("client kv-put: %v", err)
		}
	}
	ls := logs.lines(`msg="request denied"`)
	// A burst, then one a second: a slow machine earns a line per second.
	allowed := ratelog.Burst + int(time.Since(start)/ratelog.Every) + 1
	if len(ls) == 0 || len(ls) > allowed {
		t.Fatalf("%d denials logged %d lines, want between 1 and %d", tries, len(ls), allowed)
	}
	if !strings.Contains(ls[0], "peer=mallory") || !strings.Contains(ls[0], "kind=kv-put") {
		t.Errorf("denial logged as %q, want the peer and the kind", ls[0])
	}
	if n := metricValue(t, tn, "edgereg_requests_denied_total", "role=client", "kind=kv-put"); n != tries {
		t.Errorf("denied counter %v, want %d", n, tries)
	}
}

// TestBrokerCannotHoldALeaseForever: the heartbeat timeout a broker asks
// for is clamped to the node's bounds; "10 years" used to be accepted.
func TestBrokerCannotHoldALeaseForever(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.MaxLeaseTimeout = time.Minute })
	reg := registration("c1", "b1", 0, "10.0.0.1:1", "t")
	reg.HeartbeatTimeoutMs = uint64((10 * 365 * 24 * time.Hour).Milliseconds())
	ack, err := tn.dial(pki.RoleBroker).Register(ctxT(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(time.UnixMilli(ack.Lease.DeadlineMs)); d > time.Minute {
		t.Errorf("a broker asking for 10 years got a lease of %s, want at most the node's 1m", d.Round(time.Second))
	}
	if l, _ := tn.Registry().Lease("c1", reg.Addr); l.Threshold != time.Minute {
		t.Errorf("threshold %s, want 1m", l.Threshold)
	}
}

// TestInvalidTopicUpdateIsBadRequestBeforeAuthorization: an update-topics
// with an invalid topic name is code 1 whoever sends it, as a registration
// is: validation comes before authorization, so the answer does not depend
// on whose lease the address is. Before, a certificate for another group
// got "not authorized" for the same invalid request.
func TestInvalidTopicUpdateIsBadRequestBeforeAuthorization(t *testing.T) {
	tn := startNode(t, nil)
	ctx := ctxT(t)
	owner := tn.dial(pki.RoleBroker, "group-b")
	ack, err := owner.Register(ctx, registration("c1", "group-b", 0, "10.0.0.1:1", "tb"))
	if err != nil {
		t.Fatal(err)
	}
	other := tn.dial(pki.RoleBroker, "group-a")
	bad := &wire.UpdateTopics{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: ack.Lease.Epoch, Remove: []string{"bad topic/name"}}
	for name, c := range map[string]*client.Conn{"owner": owner, "other group": other} {
		if _, err := c.UpdateTopics(ctx, bad); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("%s: invalid update-topics: err = %v, want code 1", name, err)
		}
	}
	// A valid one from the other group is still refused.
	ok := &wire.UpdateTopics{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: ack.Lease.Epoch, Remove: []string{"tb"}}
	if _, err := other.UpdateTopics(ctx, ok); !errors.Is(err, wire.ErrNotAuthorized) {
		t.Errorf("update-topics of another group's lease: err = %v, want not authorized", err)
	}
	if _, err := tn.Registry().Route("tb"); err != nil {
		t.Errorf("another group's certificate removed tb: %v", err)
	}
}

// TestLeaseRaceCannotActForAnotherGroup: authorization looked the lease up,
// found none (so nothing to refuse) and then let the registry act on
// whatever lease the address had by then. Epochs are sequential, so a
// certificate limited to group A learns the next epoch from its own
// registrations and can name the epoch of group B's registration that
// lands in between: its update-topics then wrote into group B. The hook
// makes that interleaving happen every time. The lookup that authorizes
// must be the one that acts: an address with no lease, or a lease of
// another epoch, is refused before the registry is asked.
func TestLeaseRaceCannotActForAnotherGroup(t *testing.T) {
	tn := startNode(t, nil)
	ctx := ctxT(t)
	attacker := tn.dial(pki.RoleBroker, "group-a")
	const addr = "10.0.0.9:10911"
	own, err := attacker.Register(ctx, registration("c1", "group-a", 0, "10.0.1.1:1", "ta"))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	hook := func() {
		once.Do(func() { // group B's broker registers right after the check
			if _, err := tn.Registry().Register(registry.Registration{Cluster: "c1", BrokerName: "group-b", Addr: addr,
				DataVersion: wire.DataVersion{Counter: 1}, Topics: []wire.TopicConfig{{Name: "tb", ReadQueues: 1, WriteQueues: 1, Perm: 6}}}); err != nil {
				t.Error(err)
			}
		})
	}
	testHookLeaseChecked.Store(&hook)
	defer testHookLeaseChecked.Store(nil)
	evil := []wire.TopicConfig{{Name: "evil", ReadQueues: 1, WriteQueues: 1, Perm: wire.PermRead | wire.PermWrite}}
	_, err = attacker.UpdateTopics(ctx, &wire.UpdateTopics{Cluster: "c1", Addr: addr, Epoch: own.Lease.Epoch + 1, Upsert: evil})
	if _, rerr := tn.Registry().Route("evil"); rerr == nil {
		t.Fatalf("a certificate for group-a wrote topic evil into group-b's lease (update-topics err %v)", err)
	}
	if !errors.Is(err, wire.ErrLeaseNotFound) {
		t.Errorf("update-topics for an address without a lease when checked: %v, want lease not found", err)
	}
}
