package node

// Security tests from outside: what an attacker holding some valid
// credential can do over real QUIC on loopback, with real certificates.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/ratelog"
	"github.com/edgereg/edgereg/wire/remoting"
)

// waitClosed waits up to 15 s (the node re-checks its credentials every
// second) for c's connection to end, and reports whether it did.
func waitClosed(c *client.Conn) bool {
	select {
	case <-c.Done():
		return true
	case <-time.After(15 * time.Second):
		return false
	}
}

// leafOf returns the leaf certificate of a client TLS config.
func leafOf(t *testing.T, conf *tls.Config) *x509.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(conf.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// TestRevokedCertificateLosesItsConnections: revoking a certificate ends
// the connections it already holds, not only its next handshakes. Before,
// a revoked broker kept registering and heartbeating over its connection
// (QUIC keep-alives hold it for ever), and the node did not even re-read
// the list until some new handshake came.
func TestRevokedCertificateLosesItsConnections(t *testing.T) {
	dir := t.TempDir()
	revocations := filepath.Join(t.TempDir(), "revoked.txt")
	os.WriteFile(revocations, nil, 0o600)
	var logs syncBuffer
	tn := startNodeIn(t, dir, "127.0.0.1:0", func(c *Config) {
		c.RevocationFile = revocations
		logTo(&logs)(c)
	})
	ctx := ctxT(t)
	conf := tn.tlsFor(pki.RoleBroker, "stolen", "group-a")
	broker := tn.dialTLS(conf)
	ack, err := broker.Register(ctx, registration("c1", "group-a", 0, "10.0.0.1:1", "t"))
	if err != nil {
		t.Fatal(err)
	}
	reader := tn.dial(pki.RoleClient)
	os.WriteFile(revocations, []byte(leafOf(t, conf).SerialNumber.Text(16)+"\n"), 0o600)
	if !waitClosed(broker) {
		_, err := broker.Heartbeat(ctxT(t), &wire.Heartbeat{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: ack.Lease.Epoch})
		t.Fatalf("the revoked certificate's connection is still open 15 s after the revocation (its heartbeat: %v)", err)
	}
	if _, err := reader.Ping(ctxT(t)); err != nil {
		t.Fatalf("a certificate that was not revoked lost its connection: %v", err)
	}
	if ls := logs.lines("connection closed"); len(ls) != 1 || !strings.Contains(ls[0], "revoked") || !strings.Contains(ls[0], "peer=stolen") {
		t.Errorf("closing logged as %q, want one line naming the certificate and the revocation", ls)
	}
	if n := metricValue(t, tn, "edgereg_connections_closed_untrusted_total", "reason=revoked"); n != 1 {
		t.Errorf("edgereg_connections_closed_untrusted_total{reason=revoked} = %v, want 1", n)
	}
}

// TestRemovedClientCALosesItsConnections: a client CA taken out of the
// node's bundle ends the connections of the certificates it signed.
func TestRemovedClientCALosesItsConnections(t *testing.T) {
	ca1, err := pki.EnsureLocal(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := pki.EnsureLocal(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	creds := t.TempDir()
	if err := ca1.WriteCredential(pki.Request{Role: pki.RoleNode, Name: "edgereg-0", Validity: time.Hour}, creds, true); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(creds, "clients.crt")
	pemOf := func(c *x509.Certificate) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	os.WriteFile(bundle, append(pemOf(ca1.CA), pemOf(ca2.CA)...), 0o600)
	tn := startNode(t, func(c *Config) {
		c.CertFile = filepath.Join(creds, "edgereg-0.crt")
		c.KeyFile = filepath.Join(creds, "edgereg-0.key")
		c.ClientCAFile = bundle
	})
	confOf := func(ca *pki.Local, name string) *tls.Config {
		certPEM, keyPEM, err := ca.Issue(pki.RoleClient, name, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := tls.X509KeyPair(certPEM, keyPEM)
		return pki.ClientConfig(&cert, ca1.CAPool, "localhost")
	}
	droppedConf := confOf(ca2, "dropped")
	kept, dropped := tn.dialTLS(confOf(ca1, "kept")), tn.dialTLS(droppedConf)
	ctx := ctxT(t)
	for _, c := range []*client.Conn{kept, dropped} {
		if _, err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	again := tn.dialTLS(droppedConf)
	if !again.Resumed() {
		t.Fatal("the client holds no session to resume: the check of resumption below would be void")
	}
	os.WriteFile(bundle, pemOf(ca1.CA), 0o600)
	if !waitClosed(dropped) || !waitClosed(again) {
		t.Fatal("a certificate of the client CA taken out of the bundle still holds its connection 15 s later")
	}
	if _, err := kept.Ping(ctxT(t)); err != nil {
		t.Fatalf("a certificate of the CA still trusted lost its connection: %v", err)
	}
	// Nor does it get back in by resuming its session (its client holds a
	// ticket from before).
	ctx3, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if c, err := client.Dial(ctx3, tn.Addr().String(), client.Config{TLS: droppedConf}); err == nil {
		_, err = c.Ping(ctx3)
		resumed := c.Resumed()
		c.Close()
		if err == nil {
			t.Fatalf("a certificate of the removed CA got back in (resumed: %v)", resumed)
		}
	}
	if n := metricValue(t, tn, "edgereg_connections_closed_untrusted_total", "reason=untrusted"); n != 2 {
		t.Errorf("edgereg_connections_closed_untrusted_total{reason=untrusted} = %v, want 2", n)
	}
}

// TestExpiredCertificateLosesItsConnections: a connection does not
// outlive its certificate: at its NotAfter the node closes it, as the
// handshake would refuse it by then.
func TestExpiredCertificateLosesItsConnections(t *testing.T) {
	dir := t.TempDir()
	tn := startNodeIn(t, dir, "127.0.0.1:0", nil)
	cert := signWithLocalCA(t, dir, time.Now().Add(-time.Hour), time.Now().Add(2*time.Second), "edgereg://role/client")
	c := tn.dialTLS(pki.ClientConfig(&cert, tn.local.CAPool, "localhost"))
	if _, err := c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if !waitClosed(c) {
		t.Fatal("a connection outlived its certificate by 13 s")
	}
	if n := metricValue(t, tn, "edgereg_connections_closed_untrusted_total", "reason=expired"); n != 1 {
		t.Errorf("edgereg_connections_closed_untrusted_total{reason=expired} = %v, want 1", n)
	}
}

// testCA is a CA of an external PKI, for certificates edgereg's local CA
// would never issue.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var testSerial atomic.Int64

// sign signs tmpl (its public key is made here) with ca, or self-signs it
// when ca is nil, and returns the certificate with its key.
func (ca *testCA) sign(t *testing.T, tmpl *x509.Certificate) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl.SerialNumber = big.NewInt(testSerial.Add(1) + time.Now().UnixNano())
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key}
}

func caTemplate(name string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
}

func leafTemplate(name string, eku []x509.ExtKeyUsage, uris ...string) *x509.Certificate {
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: name}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: eku}
	for _, u := range uris {
		p, _ := url.Parse(u)
		tmpl.URIs = append(tmpl.URIs, p)
	}
	return tmpl
}

// chain is a client credential: c's certificate, then those sent with it.
func (c *testCA) chain(with ...*testCA) *tls.Certificate {
	tc := &tls.Certificate{Certificate: [][]byte{c.cert.Raw}, PrivateKey: c.key}
	for _, w := range with {
		tc.Certificate = append(tc.Certificate, w.cert.Raw)
	}
	return tc
}

func writePEM(t *testing.T, path string, blocks ...*pem.Block) {
	t.Helper()
	var out []byte
	for _, b := range blocks {
		out = append(out, pem.EncodeToMemory(b)...)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestExternalPKICertificates: on a node of an external CA with an
// intermediate, what verifies gets in and keeps its connection across a
// reload (the trust loop checks it again with the intermediates it sent),
// and what does not is refused: a missing intermediate, a leaf signed with
// a broker's key (a leaf is no CA), a server-only certificate used as a
// client, one not yet valid, two roles, and the CA itself as a leaf.
func TestExternalPKICertificates(t *testing.T) {
	root := (*testCA)(nil).sign(t, caTemplate("root"))
	inter := root.sign(t, caTemplate("intermediate"))
	dir := t.TempDir()
	nodeTmpl := leafTemplate("node", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, "edgereg://role/node")
	nodeTmpl.DNSNames = []string{"localhost"}
	nodeCert := root.sign(t, nodeTmpl)
	keyDER, _ := x509.MarshalPKCS8PrivateKey(nodeCert.key)
	certFile, keyFile, caFile := filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key"), filepath.Join(dir, "ca.crt")
	writePEM(t, certFile, &pem.Block{Type: "CERTIFICATE", Bytes: nodeCert.cert.Raw})
	writePEM(t, keyFile, &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	writePEM(t, caFile, &pem.Block{Type: "CERTIFICATE", Bytes: root.cert.Raw})
	revocations := filepath.Join(dir, "revoked.txt")
	os.WriteFile(revocations, nil, 0o600)
	tn := startNode(t, func(c *Config) {
		c.CertFile, c.KeyFile, c.ClientCAFile, c.RevocationFile = certFile, keyFile, caFile, revocations
	})
	roots := x509.NewCertPool()
	roots.AddCert(root.cert)
	clientAuth := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	dial := func(cert *tls.Certificate) (*client.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: pki.ClientConfig(cert, roots, "localhost")})
		if err != nil {
			return nil, err
		}
		if _, err := c.Ping(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}

	reader := inter.sign(t, leafTemplate("reader", clientAuth, "edgereg://role/client"))
	good, err := dial(reader.chain(inter))
	if err != nil {
		t.Fatalf("a client certificate of the intermediate, sent with it: %v", err)
	}
	defer good.Close()

	broker := inter.sign(t, leafTemplate("broker", clientAuth, "edgereg://role/broker"))
	notYet := leafTemplate("early", clientAuth, "edgereg://role/operator")
	notYet.NotBefore, notYet.NotAfter = time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	refused := map[string]*tls.Certificate{
		"intermediate not sent": reader.chain(),
		"leaf signed by a broker's key": broker.sign(t, leafTemplate("forged", clientAuth, "edgereg://role/operator")).
			chain(broker, inter),
		"server-only certificate": inter.sign(t, leafTemplate("server", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			"edgereg://role/operator")).chain(inter),
		"not yet valid": inter.sign(t, notYet).chain(inter),
		"two roles": inter.sign(t, leafTemplate("two", clientAuth, "edgereg://role/client", "edgereg://role/operator")).
			chain(inter),
		"the CA as a leaf": root.chain(),
	}
	for name, cert := range refused {
		t.Run(name, func(t *testing.T) {
			if c, err := dial(cert); err == nil {
				c.Close()
				t.Fatal("the node let it in")
			}
		})
	}
	// A reload checks every connection again: the good one stays.
	os.WriteFile(revocations, []byte("# nobody\n"), 0o600)
	nodetestWait(t, "the check after the reload", func() bool { return tn.rechecks.Load() > 0 })
	if _, err := good.Ping(ctxT(t)); err != nil {
		t.Fatalf("a valid certificate sent with its intermediate lost its connection at a reload: %v", err)
	}
}

// TestRemotingBadFramesLogRateLimited: anyone who reaches the remoting
// port (it has no authentication, and reads are always served) could
// make the node write a log line per connection it opened and sent a bad
// frame on; those lines are rate-limited as the QUIC side's are.
func TestRemotingBadFramesLogRateLimited(t *testing.T) {
	var logs syncBuffer
	tn := startNode(t, func(c *Config) {
		c.RemotingAddr = "127.0.0.1:0"
		logTo(&logs)(c)
	})
	const conns = 200
	for range conns {
		nc, err := net.DialTimeout("tcp", tn.RemotingAddr().String(), 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		nc.Write([]byte{0, 0, 0, 2, 0, 0}) // a frame shorter than its header length field
		nc.SetReadDeadline(time.Now().Add(3 * time.Second))
		io.Copy(io.Discard, nc) // until the node closes it
		nc.Close()
	}
	nodetestWait(t, "every bad frame counted", func() bool {
		return metricValue(t, tn, "edgereg_remoting_bad_frames_total") == conns
	})
	if n := len(logs.lines("bad frame")); n > 2*ratelog.Burst {
		t.Fatalf("%d bad frames on %d connections made %d log lines, want at most %d", conns, conns, n, 2*ratelog.Burst)
	}
}

// TestBrokerCannotActOnAnotherGroupsLease: a broker certificate for group
// A that knows group B's lease exactly (address and epoch: both are in
// every route and lease list) can neither renew, update nor remove it, nor
// touch B's write permission; B's lease and routes are as they were.
func TestBrokerCannotActOnAnotherGroupsLease(t *testing.T) {
	tn := startNode(t, nil)
	ctx := ctxT(t)
	b := tn.dial(pki.RoleBroker, "group-b")
	ack, err := b.Register(ctx, registration("c1", "group-b", 0, "10.0.0.2:1", "tb"))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := tn.Registry().Route("tb")
	a := tn.dial(pki.RoleBroker, "group-a")
	epoch := ack.Lease.Epoch
	attempts := map[string]func() error{
		"heartbeat": func() error {
			_, err := a.Heartbeat(ctx, &wire.Heartbeat{Cluster: "c1", Addr: "10.0.0.2:1", Epoch: epoch})
			return err
		},
		"update-topics": func() error {
			_, err := a.UpdateTopics(ctx, &wire.UpdateTopics{Cluster: "c1", Addr: "10.0.0.2:1", Epoch: epoch,
				Remove: []string{"tb"}, Upsert: []wire.TopicConfig{{Name: "evil", ReadQueues: 1, WriteQueues: 1, Perm: 6}}})
			return err
		},
		"unregister": func() error {
			return a.Unregister(ctx, &wire.Unregister{Cluster: "c1", Addr: "10.0.0.2:1", Epoch: epoch})
		},
		"wipe-write-perm": func() error { _, err := a.WipeWritePerm(ctx, "group-b"); return err },
		"add-write-perm":  func() error { _, err := a.AddWritePerm(ctx, "group-b"); return err },
		"delete-topic":    func() error { return a.DeleteTopic(ctx, "tb") },
		"register as group-b": func() error {
			_, err := a.Register(ctx, registration("c1", "group-b", 1, "10.0.0.3:1", "tb"))
			return err
		},
	}
	for name, try := range attempts {
		if err := try(); !errors.Is(err, wire.ErrNotAuthorized) {
			t.Errorf("%s of group-b's lease by group-a's certificate: err = %v, want not authorized", name, err)
		}
	}
	l, ok := tn.Registry().Lease("c1", "10.0.0.2:1")
	if !ok || l.Epoch != epoch || l.Heartbeats != 0 {
		t.Errorf("group-b's lease after the attempts: %+v (held %v), want epoch %d untouched", l, ok, epoch)
	}
	if after, err := tn.Registry().Route("tb"); err != nil || after.Version != before.Version {
		t.Errorf("group-b's route changed: %v", err)
	}
	if _, err := tn.Registry().Route("evil"); err == nil {
		t.Error("group-a's update added a topic to group-b")
	}
}

// TestRemotingUnknownGroupLogRateLimited: a topic registration naming a
// broker group the node does not hold is logged, but a peer repeating it
// (the remoting port authenticates nobody) does not get a line per request.
func TestRemotingUnknownGroupLogRateLimited(t *testing.T) {
	var logs syncBuffer
	tn := startRemotingNode(t, logTo(&logs))
	c := dialRemoting(t, tn)
	body := (&remoting.TopicRouteData{QueueDatas: []remoting.QueueData{{BrokerName: "nobody", ReadQueueNums: 1,
		WriteQueueNums: 1, Perm: 6}}}).Encode(remoting.Legacy)
	const requests = 200
	for i := range requests {
		req := remoting.NewRequest(remoting.RegisterTopicInNameSrv, int32(i+1), map[string]string{"topic": "t"}, body)
		if r := c.call(req); r.Code != remoting.Success {
			t.Fatal(r)
		}
	}
	if n := len(logs.lines("unknown broker group")); n == 0 || n > 2*ratelog.Burst {
		t.Fatalf("%d topic registrations naming an unknown group made %d log lines, want 1 to %d", requests, n, 2*ratelog.Burst)
	}
}

// TestRemotingByDefaultCannotTouchQUICBrokers: remoting has no identity,
// so on a node with the remoting listener's defaults (no
// --remoting-allow-brokers, no --remoting-allow-admin) a remoting peer can
// neither take a QUIC-registered broker's address, nor remove it, renew
// it, change its write permission, delete its topic or write KV; it reads.
func TestRemotingByDefaultCannotTouchQUICBrokers(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.RemotingAddr = "127.0.0.1:0" })
	ctx := ctxT(t)
	b := tn.dial(pki.RoleBroker, "broker-a")
	ack, err := b.Register(ctx, registration("DefaultCluster", "broker-a", 0, "127.0.0.1:10911", "t"))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := tn.Registry().Route("t")
	c := dialRemoting(t, tn)
	broker := remoting.BrokerHeader{ClusterName: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911"}.Ext()
	reqs := map[string]*remoting.Command{
		"register at its address": registerCmd(t, 1, 0, "127.0.0.1:10911", remoting.DataVersion{Counter: 9}, "evil"),
		"unregister":              remoting.NewRequest(remoting.UnregisterBroker, 2, broker, nil),
		"heartbeat":               remoting.NewRequest(remoting.BrokerHeartbeat, 3, broker, nil),
		"wipe write permission":   remoting.NewRequest(remoting.WipeWritePermOfBroker, 4, map[string]string{"brokerName": "broker-a"}, nil),
		"delete its topic":        remoting.NewRequest(remoting.DeleteTopicInNameSrv, 5, map[string]string{"topic": "t"}, nil),
		"put KV":                  remoting.NewRequest(remoting.PutKVConfig, 6, map[string]string{"namespace": "ns", "key": "k", "value": "v"}, nil),
	}
	for name, req := range reqs {
		if r := c.call(req); r.Code != remoting.NoPermission {
			t.Errorf("%s over remoting: code %d (%s), want NO_PERMISSION", name, r.Code, r.Remark)
		}
	}
	l, ok := tn.Registry().Lease("DefaultCluster", "127.0.0.1:10911")
	if !ok || l.Epoch != ack.Lease.Epoch || l.Heartbeats != 0 {
		t.Errorf("the QUIC broker's lease after remoting's attempts: %+v (held %v)", l, ok)
	}
	if after, err := tn.Registry().Route("t"); err != nil || after.Version != before.Version {
		t.Errorf("its route changed: %v", err)
	}
	if r := c.call(remoting.NewRequest(remoting.GetRouteInfoByTopic, 7, map[string]string{"topic": "t"}, nil)); r.Code != remoting.Success {
		t.Errorf("a route read over remoting: code %d (%s)", r.Code, r.Remark)
	}
}

// TestBrokenRevocationListKeepsTheOldOneAndSaysSoOnce: a revocation list
// rewritten into something unreadable leaves the last good one in force
// (a revoked certificate stays out, connections stay), and the node says
// so once, not once a second for as long as the file stays broken.
func TestBrokenRevocationListKeepsTheOldOneAndSaysSoOnce(t *testing.T) {
	dir := t.TempDir()
	revocations := filepath.Join(t.TempDir(), "revoked.txt")
	os.WriteFile(revocations, nil, 0o600)
	var logs syncBuffer
	tn := startNodeIn(t, dir, "127.0.0.1:0", func(c *Config) {
		c.RevocationFile = revocations
		logTo(&logs)(c)
	})
	revokedConf := tn.tlsFor(pki.RoleClient, "revoked")
	os.WriteFile(revocations, []byte(leafOf(t, revokedConf).SerialNumber.Text(16)+"\n"), 0o600)
	nodetestWait(t, "the revocation in force", func() bool { return tn.creds.Generation() == 1 })
	reader := tn.dial(pki.RoleClient)
	os.WriteFile(revocations, []byte("this is not a serial\n"), 0o600)
	const msg = "TLS credentials changed but cannot be used"
	nodetestWait(t, "the broken file reported", func() bool { return len(logs.lines(msg)) > 0 })
	if ls := logs.lines(msg); !strings.Contains(ls[0], "revoked.txt") || !strings.Contains(ls[0], "bad serial") {
		t.Errorf("reported as %q, want the file and what is wrong with it", ls[0])
	}
	// Three more looks at the still broken file.
	for deadline := time.Now().Add(3500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
	}
	if n := len(logs.lines(msg)); n != 1 {
		t.Errorf("the same broken file reported %d times in 3.5 s, want once", n)
	}
	if _, err := reader.Ping(ctxT(t)); err != nil {
		t.Fatalf("a connection lost at a reload that failed: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: revokedConf}); err == nil {
		_, err = c.Ping(ctx)
		c.Close()
		if err == nil {
			t.Fatal("a broken revocation list let a revoked certificate in")
		}
	}
	// Fixed, the file is used again, and a new breakage is reported again.
	os.WriteFile(revocations, nil, 0o600)
	nodetestWait(t, "the fixed file in force", func() bool { return tn.creds.Generation() == 2 })
	os.WriteFile(revocations, []byte("still not a serial\n"), 0o600)
	nodetestWait(t, "the new breakage reported", func() bool { return len(logs.lines(msg)) == 2 })
}
