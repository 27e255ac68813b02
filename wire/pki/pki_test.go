package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func ensureLocal(t *testing.T, dataDir string, hosts ...string) *Local {
	t.Helper()
	l, err := EnsureLocal(dataDir, hosts)
	if err != nil {
		t.Fatalf("EnsureLocal: %v", err)
	}
	return l
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestEnsureLocalCreatesFiles(t *testing.T) {
	dataDir := t.TempDir()
	l := ensureLocal(t, dataDir, "10.1.2.3", "Node1.Example", "[fd00::7]:9876")
	dir := TLSDir(dataDir)

	if got := mode(t, dir); got != 0o700 {
		t.Errorf("tls dir mode = %o, want 700", got)
	}
	for _, tc := range []struct {
		file string
		want fs.FileMode
	}{
		{"ca.crt", 0o644}, {"ca.key", 0o600},
		{"node.crt", 0o644}, {"node.key", 0o600},
		{"operator.crt", 0o644}, {"operator.key", 0o600},
	} {
		if got := mode(t, filepath.Join(dir, tc.file)); got != tc.want {
			t.Errorf("%s mode = %o, want %o", tc.file, got, tc.want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 6 {
		t.Errorf("tls dir has %d entries (leftover temp files?), want 6", len(entries))
	}

	if !l.CA.IsCA || l.CA.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("CA: IsCA=%v alg=%v", l.CA.IsCA, l.CA.PublicKeyAlgorithm)
	}
	if years := time.Until(l.CA.NotAfter).Hours() / 24 / 365; years < 9.9 {
		t.Errorf("CA valid for %.1f years, want 10", years)
	}
	node := l.Node.Leaf
	for _, h := range []string{"127.0.0.1", "::1", "localhost", "10.1.2.3", "node1.example", "fd00::7"} {
		if err := node.VerifyHostname(h); err != nil {
			t.Errorf("node cert does not cover %s: %v", h, err)
		}
	}
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if !slices.Contains(node.ExtKeyUsage, u) {
			t.Errorf("node cert lacks ext key usage %v", u)
		}
	}
	if id, err := IdentityFromCert(node); err != nil || id.Role != RoleNode {
		t.Errorf("node identity = %+v, %v", id, err)
	}
	op, err := readCertFile(filepath.Join(dir, "operator.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if id, err := IdentityFromCert(op); err != nil || id.Role != RoleOperator || id.Name != "local-operator" {
		t.Errorf("operator identity = %+v, %v", id, err)
	}
}

func TestEnsureLocalIdempotent(t *testing.T) {
	dataDir := t.TempDir()
	first := ensureLocal(t, dataDir, "10.0.0.1")
	opBefore, _ := os.ReadFile(filepath.Join(TLSDir(dataDir), "operator.crt"))

	tests := []struct {
		name      string
		hosts     []string
		newSerial bool
	}{
		{"same hosts", []string{"10.0.0.1"}, false},
		{"subset of hosts", nil, false},
		{"new host", []string{"10.0.0.1", "node2.example"}, true},
	}
	prev := first.Node.Leaf.SerialNumber
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := ensureLocal(t, dataDir, tc.hosts...)
			if !l.CA.Equal(first.CA) {
				t.Fatal("CA changed")
			}
			serial := l.Node.Leaf.SerialNumber
			if changed := serial.Cmp(prev) != 0; changed != tc.newSerial {
				t.Errorf("node cert reissued = %v, want %v", changed, tc.newSerial)
			}
			for _, h := range tc.hosts {
				if err := l.Node.Leaf.VerifyHostname(h); err != nil {
					t.Errorf("node cert does not cover %s", h)
				}
			}
			prev = serial
		})
	}
	opAfter, _ := os.ReadFile(filepath.Join(TLSDir(dataDir), "operator.crt"))
	if !bytes.Equal(opBefore, opAfter) {
		t.Error("operator certificate was reissued")
	}
}

func TestEnsureLocalRenewsExpiringNode(t *testing.T) {
	dataDir := t.TempDir()
	l := ensureLocal(t, dataDir)
	now := time.Now()
	certPEM, keyPEM, err := l.issue(RoleNode, nodeName, nil, defaultHosts, now.Add(-time.Hour), now.Add(10*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dir := TLSDir(dataDir)
	if err := writePair(filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key"), certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	l2 := ensureLocal(t, dataDir)
	if time.Until(l2.Node.Leaf.NotAfter) < 300*24*time.Hour {
		t.Errorf("node cert expiring %s was not renewed", l2.Node.Leaf.NotAfter)
	}
}

func TestIssueRoleRoundTrip(t *testing.T) {
	l := ensureLocal(t, t.TempDir())
	tests := []struct {
		role   Role
		name   string
		groups []string
	}{
		{RoleBroker, "broker-a", nil},
		{RoleBroker, "broker-b", []string{"group-1", "group 2/x"}},
		{RoleClient, "app", nil},
		{RoleOperator, "alice", nil},
		{RoleNode, "10.9.8.7", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			certPEM, keyPEM, err := l.Issue(tc.role, tc.name, tc.groups, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			id, err := IdentityFromCert(pair.Leaf)
			if err != nil {
				t.Fatal(err)
			}
			if id.Role != tc.role || id.Name != tc.name || !slices.Equal(id.BrokerGroups, tc.groups) {
				t.Errorf("identity = %+v, want role %s name %s groups %v", id, tc.role, tc.name, tc.groups)
			}
			if pair.Leaf.SerialNumber.BitLen() < 64 {
				t.Errorf("serial %x looks too short for 128 random bits", pair.Leaf.SerialNumber)
			}
		})
	}
}

func TestMayRegisterGroup(t *testing.T) {
	tests := []struct {
		id    Identity
		group string
		want  bool
	}{
		{Identity{Role: RoleBroker}, "any", true},
		{Identity{Role: RoleBroker, BrokerGroups: []string{"a", "b"}}, "b", true},
		{Identity{Role: RoleBroker, BrokerGroups: []string{"a"}}, "b", false},
		{Identity{Role: RoleBroker}, "", false},
		{Identity{Role: RoleOperator}, "a", false},
		{Identity{Role: RoleClient, BrokerGroups: []string{"a"}}, "a", false},
	}
	for _, tc := range tests {
		if got := tc.id.MayRegisterGroup(tc.group); got != tc.want {
			t.Errorf("%+v.MayRegisterGroup(%q) = %v, want %v", tc.id, tc.group, got, tc.want)
		}
	}
}

func TestParseRole(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Role
		ok   bool
	}{
		{"broker", RoleBroker, true}, {" Operator ", RoleOperator, true},
		{"client", RoleClient, true}, {"node", RoleNode, true},
		{"", "", false}, {"admin", "", false},
	} {
		got, err := ParseRole(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseRole(%q) = %q, %v", tc.in, got, err)
		}
	}
}

// certWithURIs signs a certificate carrying exactly the given URI SANs.
func certWithURIs(t *testing.T, l *Local, uris ...string) *x509.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42),
		Subject:      pkix.Name{CommonName: "odd"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, l.CA, key.Public(), l.caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestIdentityFromCertRefuses(t *testing.T) {
	l := ensureLocal(t, t.TempDir())
	tests := []struct {
		name   string
		uris   []string
		noRole bool
	}{
		{"no SAN", nil, true},
		{"foreign scheme only", []string{"spiffe://role/operator"}, true},
		{"two roles", []string{"edgereg://role/client", "edgereg://role/operator"}, true},
		{"unknown role", []string{"edgereg://role/root"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := IdentityFromCert(certWithURIs(t, l, tc.uris...))
			if err == nil {
				t.Fatal("accepted")
			}
			if errors.Is(err, ErrNoRole) != tc.noRole {
				t.Errorf("err = %v, want ErrNoRole=%v", err, tc.noRole)
			}
		})
	}
	if _, err := IdentityFromConnState(tls.ConnectionState{}); !errors.Is(err, ErrNoPeerCert) {
		t.Errorf("empty conn state: err = %v, want ErrNoPeerCert", err)
	}
}

func TestIssueRefuses(t *testing.T) {
	l := ensureLocal(t, t.TempDir())
	tests := []struct {
		name     string
		role     Role
		certName string
		groups   []string
		validity time.Duration
	}{
		{"empty name", RoleClient, "", nil, time.Hour},
		{"parent dir", RoleClient, "../x", nil, time.Hour},
		{"slash", RoleClient, "a/b", nil, time.Hour},
		{"backslash", RoleClient, `a\b`, nil, time.Hour},
		{"dotdot", RoleClient, "..", nil, time.Hour},
		{"clobbers ca.crt", RoleClient, "ca", nil, time.Hour},
		{"unknown role", Role("root"), "x", nil, time.Hour},
		{"groups on client", RoleClient, "x", []string{"g"}, time.Hour},
		{"empty group", RoleBroker, "x", []string{""}, time.Hour},
		{"zero validity", RoleClient, "x", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			if err := l.IssueFiles(tc.role, tc.certName, tc.groups, tc.validity, out); err == nil {
				t.Fatal("IssueFiles accepted")
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("refused request still created %s", out)
			}
		})
	}
}

func TestIssueFiles(t *testing.T) {
	l := ensureLocal(t, t.TempDir())
	out := filepath.Join(t.TempDir(), "creds")
	if err := l.IssueFiles(RoleBroker, "broker-a", []string{"g1"}, time.Hour, out); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, filepath.Join(out, "broker-a.key")); got != 0o600 {
		t.Errorf("key mode = %o, want 600", got)
	}
	cert, pool, err := LoadCredentials(filepath.Join(out, "broker-a.crt"), filepath.Join(out, "broker-a.key"), filepath.Join(out, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("issued cert does not verify against written ca.crt: %v", err)
	}
}

func TestLoadCredentialsNamesFile(t *testing.T) {
	dataDir := t.TempDir()
	ensureLocal(t, dataDir)
	dir := TLSDir(dataDir)
	crt, key, ca := filepath.Join(dir, "operator.crt"), filepath.Join(dir, "operator.key"), filepath.Join(dir, "ca.crt")
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct{ crt, key, ca, bad string }{
		{missing, key, ca, missing},
		{crt, missing, ca, missing},
		{crt, key, missing, missing},
		{crt, key, key, key}, // a key is not a CA bundle
		{crt, ca, ca, ca},    // a certificate is not a key
	} {
		_, _, err := LoadCredentials(tc.crt, tc.key, tc.ca)
		if err == nil || !strings.Contains(err.Error(), tc.bad) {
			t.Errorf("LoadCredentials(%s, %s, %s) err = %v, want it to name %s", tc.crt, tc.key, tc.ca, err, tc.bad)
		}
	}
}

func TestLocalOperator(t *testing.T) {
	dataDir := t.TempDir()
	_, _, err := LocalOperator(dataDir)
	if !errors.Is(err, ErrNoLocalCA) || !strings.Contains(err.Error(), "edgereg node --data") {
		t.Fatalf("before EnsureLocal: err = %v, want ErrNoLocalCA with a hint", err)
	}
	ensureLocal(t, dataDir)
	cert, pool, err := LocalOperator(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := IdentityFromCert(cert.Leaf); err != nil || id.Role != RoleOperator {
		t.Errorf("identity = %+v, %v", id, err)
	}
	if pool == nil {
		t.Error("nil pool")
	}
}

// handshake runs one TLS handshake over loopback TCP. The client reads a
// byte afterwards: in TLS 1.3 the server judges the client certificate after
// the client's handshake has returned, so only the read sees a refusal.
func handshake(t *testing.T, srvCfg, cliCfg *tls.Config) (srv tls.ConnectionState, cli tls.ConnectionState, srvErr, cliErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		cs  tls.ConnectionState
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Server(c, srvCfg)
		if err := tc.Handshake(); err != nil {
			done <- result{err: err}
			return
		}
		_, err = tc.Write([]byte{1})
		done <- result{tc.ConnectionState(), err}
	}()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, cliCfg)
	cliErr = tc.Handshake()
	if cliErr == nil {
		_, cliErr = tc.Read(make([]byte, 1))
		cli = tc.ConnectionState()
	}
	r := <-done
	return r.cs, cli, r.err, cliErr
}

func TestHandshake(t *testing.T) {
	dataDir := t.TempDir()
	l := ensureLocal(t, dataDir)
	opCert, pool, err := LocalOperator(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()

	pair := func(certPEM, keyPEM []byte, err error) *tls.Certificate {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	foreign := ensureLocal(t, t.TempDir())
	foreignCert := pair(foreign.Issue(RoleOperator, "mallory", nil, time.Hour))
	expired := pair(l.issue(RoleOperator, "old", nil, nil, now.Add(-48*time.Hour), now.Add(-24*time.Hour)))
	revoked := pair(l.Issue(RoleOperator, "fired", nil, time.Hour))
	broker := pair(l.Issue(RoleBroker, "broker-a", []string{"g1"}, time.Hour))

	rlFile := filepath.Join(t.TempDir(), "revoked.txt")
	os.WriteFile(rlFile, []byte("# fired\n"+revoked.Leaf.SerialNumber.Text(16)+"\n"), 0o600)
	rl, err := LoadRevocations(rlFile)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		cert      *tls.Certificate
		anonymous bool
		wantRole  Role     // "" means the handshake must fail
		wantErr   error    // checked against the server error when non-nil
		groups    []string // expected broker groups
	}{
		{name: "operator", cert: &opCert, wantRole: RoleOperator},
		{name: "broker with groups", cert: broker, wantRole: RoleBroker, groups: []string{"g1"}},
		{name: "foreign CA", cert: foreignCert},
		{name: "foreign CA with anonymous allowed", cert: foreignCert, anonymous: true},
		{name: "expired", cert: expired},
		{name: "revoked", cert: revoked, wantErr: ErrRevoked},
		{name: "no cert", cert: nil},
		{name: "no cert, anonymous allowed", cert: nil, anonymous: true, wantErr: ErrNoPeerCert},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srvCfg := ServerConfig(l.Node, l.CAPool, tc.anonymous)
			srvCfg.VerifyPeerCertificate = VerifyPeer(rl)
			srv, cli, srvErr, cliErr := handshake(t, srvCfg, ClientConfig(tc.cert, pool, "127.0.0.1:9876"))

			anonymousOK := tc.anonymous && tc.cert == nil
			if tc.wantRole == "" && !anonymousOK {
				if srvErr == nil || cliErr == nil {
					t.Fatalf("handshake succeeded: server err %v, client err %v", srvErr, cliErr)
				}
				if tc.wantErr != nil && !errors.Is(srvErr, tc.wantErr) {
					t.Errorf("server err = %v, want %v", srvErr, tc.wantErr)
				}
				return
			}
			if srvErr != nil || cliErr != nil {
				t.Fatalf("handshake failed: server err %v, client err %v", srvErr, cliErr)
			}
			if srv.Version != tls.VersionTLS13 || srv.NegotiatedProtocol != ALPN || cli.NegotiatedProtocol != ALPN {
				t.Errorf("version %x, ALPN %q/%q", srv.Version, srv.NegotiatedProtocol, cli.NegotiatedProtocol)
			}
			id, err := IdentityFromConnState(srv)
			if anonymousOK {
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("anonymous identity err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || id.Role != tc.wantRole || !slices.Equal(id.BrokerGroups, tc.groups) {
				t.Errorf("server sees %+v, %v; want role %s groups %v", id, err, tc.wantRole, tc.groups)
			}
			if peer, err := IdentityFromConnState(cli); err != nil || peer.Role != RoleNode {
				t.Errorf("client sees server as %+v, %v; want role node", peer, err)
			}
		})
	}
}

func TestClientRefusesWrongServerName(t *testing.T) {
	dataDir := t.TempDir()
	l := ensureLocal(t, dataDir)
	opCert, pool, _ := LocalOperator(dataDir)
	_, _, _, cliErr := handshake(t, ServerConfig(l.Node, l.CAPool, false), ClientConfig(&opCert, pool, "10.99.99.99"))
	var hostErr x509.HostnameError
	if !errors.As(cliErr, &hostErr) {
		t.Errorf("client err = %v, want a HostnameError", cliErr)
	}
}

// A client that resumed a session must still be checked for revocation,
// which is why VerifyConnection exists next to VerifyPeer.
func TestVerifyConnectionOnResumption(t *testing.T) {
	dataDir := t.TempDir()
	l := ensureLocal(t, dataDir)
	opCert, pool, _ := LocalOperator(dataDir)
	cliCfg := ClientConfig(&opCert, pool, "")
	srvCfg := ServerConfig(l.Node, l.CAPool, false)

	if _, _, srvErr, cliErr := handshake(t, srvCfg, cliCfg); srvErr != nil || cliErr != nil {
		t.Fatalf("first handshake: %v, %v", srvErr, cliErr)
	}
	srv, _, srvErr, cliErr := handshake(t, srvCfg, cliCfg)
	if srvErr != nil || cliErr != nil || !srv.DidResume {
		t.Fatalf("second handshake: resumed=%v, %v, %v", srv.DidResume, srvErr, cliErr)
	}

	rl := &RevocationList{serials: map[string]struct{}{opCert.Leaf.SerialNumber.Text(16): {}}}
	revoking := srvCfg.Clone() // Clone keeps the session ticket keys
	revoking.VerifyConnection = VerifyConnection(rl)
	_, _, srvErr, _ = handshake(t, revoking, cliCfg)
	if !errors.Is(srvErr, ErrRevoked) {
		t.Errorf("resumed revoked client: server err = %v, want ErrRevoked", srvErr)
	}
}

func TestLoadRevocations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "revoked.txt")
	os.WriteFile(path, []byte("# revoked\n\n  0A1B  # laptop\n0x00ff\n01:02:03\n"), 0o600)
	rl, err := LoadRevocations(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		serial int64
		want   bool
	}{{0x0a1b, true}, {0xff, true}, {0x010203, true}, {0x1234, false}} {
		if got := rl.Revoked(big.NewInt(tc.serial)); got != tc.want {
			t.Errorf("Revoked(%x) = %v, want %v", tc.serial, got, tc.want)
		}
	}
	var none *RevocationList
	if none.Revoked(big.NewInt(1)) {
		t.Error("nil list revokes")
	}
	os.WriteFile(path, []byte("12\nnot-hex\n"), 0o600)
	if _, err := LoadRevocations(path); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Errorf("bad line: err = %v, want line 2 named", err)
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "quic", "reset.key")
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if k1 != k2 || k1 == [32]byte{} {
		t.Error("key not stable across calls")
	}
	if got := mode(t, path); got != 0o600 {
		t.Errorf("key mode = %o, want 600", got)
	}
	for _, size := range []int{0, 31, 33} {
		bad := filepath.Join(dir, "bad.key")
		os.WriteFile(bad, make([]byte, size), 0o600)
		if _, err := LoadOrCreateKey(bad); err == nil {
			t.Errorf("%d-byte file accepted", size)
		}
	}
}

// TestOddEdgeregSANsFailClosed: a URI SAN of the edgereg scheme that is not
// one of the two forms must not be ignored. A broker-group SAN whose host is
// spelt in capitals (RFC 3986 hosts are case-insensitive, so it names the
// same thing), carries a port, or is misspelt was skipped, and a broker
// certificate meant for one group then read as one that may register any
// group.
func TestOddEdgeregSANsFailClosed(t *testing.T) {
	l := ensureLocal(t, t.TempDir())
	for _, group := range []string{
		"edgereg://Broker-Group/a",
		"edgereg://BROKER-GROUP/a",
		"edgereg://broker-group:1/a",
		"edgereg://broker-groups/a",
		"edgereg:broker-group/a",
	} {
		t.Run(group, func(t *testing.T) {
			id, err := IdentityFromCert(certWithURIs(t, l, "edgereg://role/broker", group))
			if err == nil && id.MayRegisterGroup("b") {
				t.Fatalf("a certificate with %s may register any group: %+v", group, id)
			}
		})
	}
	// A role host in capitals names the role host too.
	id, err := IdentityFromCert(certWithURIs(t, l, "edgereg://ROLE/broker", "edgereg://Broker-Group/a"))
	if err != nil || id.Role != RoleBroker || !slices.Equal(id.BrokerGroups, []string{"a"}) {
		t.Errorf("capitalised hosts: %+v, %v; want broker of group a", id, err)
	}
}
