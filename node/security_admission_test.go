package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// pingOnce dials conf and pings once: nil when the node let it in.
func pingOnce(t *testing.T, tn *testNode, conf *tls.Config) (*client.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: conf})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Ping(ctx); err != nil {
		return c, err
	}
	return c, nil
}

// TestAnonymousPeersGiveWayToCertificates: with anonymous peers allowed,
// anonymous connections from one source IP (a NAT, or one attacker) that
// fill the IP's reader budget do not lock out the readers with a
// certificate on that IP: a certificate's connection takes the place of
// the least recently active anonymous one. Anonymous peers have no
// identity to be limited by, so before one anonymous peer could hold
// every reader slot of its IP. A further anonymous peer is still refused.
func TestAnonymousPeersGiveWayToCertificates(t *testing.T) {
	const perHost = 4
	tn := startNode(t, func(c *Config) {
		c.AllowAnonymousClients = true
		c.MaxConnsPerHost = perHost
	})
	anon := pki.ClientConfig(nil, tn.local.CAPool, "localhost")
	var anons []*client.Conn
	for i := range perHost {
		c, err := pingOnce(t, tn, anon)
		if err != nil {
			t.Fatalf("anonymous connection %d: %v", i, err)
		}
		anons = append(anons, c)
	}
	if _, err := pingOnce(t, tn, anon); err == nil {
		t.Fatal("an anonymous peer got in on an IP whose reader budget anonymous peers fill")
	}
	if _, err := pingOnce(t, tn, tn.tlsFor(pki.RoleClient, "orders-service")); err != nil {
		t.Fatalf("a client certificate on an IP that anonymous peers fill: %v; want it let in in place of one of them", err)
	}
	// The replaced connection's ping fails (it is closed); the others are
	// served.
	closed := 0
	for _, c := range anons {
		if _, err := c.Ping(ctxT(t)); err != nil {
			closed++
		}
	}
	if closed != 1 {
		t.Errorf("%d anonymous connections closed, want exactly the one replaced", closed)
	}
	if got := metricValue(t, tn, "edgereg_connections_replaced_total"); got != 1 {
		t.Errorf("edgereg_connections_replaced_total = %v, want 1", got)
	}
}

// TestAnonymousGiveWayRules: the rules of TestAnonymousPeersGiveWayToCertificates
// on their own: a certificate takes an anonymous peer's place on its full
// IP, or anywhere when the readers' share of the node is full; never when
// the certificate is at its own limit (one replacement must do), never for
// another anonymous peer, and never a broker's place.
func TestAnonymousGiveWayRules(t *testing.T) {
	ad := newAdmission(Config{MaxConns: 10, MaxConnsPerHost: 2, MaxConnsPerIdentity: 1}.WithDefaults())
	seq := int64(0)
	conn := func(host, ident string) *admitted {
		seq++
		a := &admitted{host: host, ident: ident, class: userClass}
		a.last.Store(seq)
		return a
	}
	admit := func(a *admitted) (*admitted, string) { return placeAndCount(ad, a) }
	a1, a2 := conn("h1", ""), conn("h1", "")
	admit(a1)
	admit(a2)
	if v, reason := admit(conn("h1", "")); reason != refusedPerHost || v != nil {
		t.Fatalf("anonymous on an IP anonymous peers fill: victim %v, reason %q; want refused", v, reason)
	}
	x := conn("h1", "X")
	if v, reason := admit(x); reason != "" || v != a1 {
		t.Fatalf("certificate X on an IP anonymous peers fill: victim %v, reason %q; want the oldest anonymous replaced", v, reason)
	}
	// X at its own limit on h1 replaces its own connection, not a2.
	if v, reason := admit(conn("h1", "X")); reason != "" || v != x {
		t.Fatalf("X at its limit: victim %v, reason %q; want its own replaced", v, reason)
	}
	// The readers' share (9 of 10): fill it with anonymous peers elsewhere.
	for i := range 7 {
		if _, reason := admit(conn(fmt.Sprint("far", i), "")); reason != "" {
			t.Fatalf("anonymous %d: %s", i, reason)
		}
	}
	if v, reason := admit(conn("h9", "")); reason != refusedClientShare || v != nil {
		t.Fatalf("anonymous on a node whose readers' share is full: victim %v, reason %q", v, reason)
	}
	if v, reason := admit(conn("h9", "Y")); reason != "" || v != a2 {
		t.Fatalf("certificate Y on a node whose readers' share is full: victim %v, reason %q; want the oldest anonymous (a2) replaced", v, reason)
	}
	if ad.clients != 9 || len(ad.anonymous["h1"]) != 0 || len(ad.anonymous) != 7 {
		t.Fatalf("counts: clients %d, anonymous on h1 %d, IPs with anonymous peers %d", ad.clients, len(ad.anonymous["h1"]), len(ad.anonymous))
	}
}
