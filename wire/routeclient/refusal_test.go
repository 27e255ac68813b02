package routeclient_test

import (
	"crypto/tls"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/routeclient"
)

// issue 10 item 12: a watch whose every node refuses the client's
// credentials (a certificate from another CA) must not look healthy: the
// refusal is delivered on the channel, which then closes, and the retries
// stop; Route returns it; OnConnState reports the node refused.
func TestWatchWithForeignCADeliversTheRefusal(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	foreign := newTestCA(t)
	var mu sync.Mutex
	var states []routeclient.ConnEvent
	c := newClient(t, foreign, nodes.Static(tn.Addr()), func(cfg *routeclient.Config) {
		cfg.OnConnState = func(e routeclient.ConnEvent) {
			mu.Lock()
			states = append(states, e)
			mu.Unlock()
		}
	})
	ctx := ctxT(t)
	ch, err := c.Watch(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case u, ok := <-ch:
		if !ok {
			t.Fatal("the watch channel closed without saying why")
		}
		if !errors.Is(u.Err, routeclient.ErrRefused) {
			t.Fatalf("first update %+v, want the refusal (ErrRefused)", u)
		}
		t.Logf("delivered: %v", u.Err)
	case <-time.After(10 * time.Second):
		t.Fatal("a watch with a foreign CA stayed silent for 10 s")
	}
	select {
	case u, ok := <-ch:
		if ok {
			t.Fatalf("after the refusal: %+v, want the channel closed", u)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the channel stayed open after the refusal")
	}
	if _, _, err := c.Route(ctx, "orders"); !errors.Is(err, routeclient.ErrRefused) {
		t.Errorf("route with a foreign CA: %v, want ErrRefused", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(states) == 0 || states[0].State != routeclient.StateRefused || states[0].Node != tn.Addr() {
		t.Errorf("connection states %+v, want %s refused", states, tn.Addr())
	}
}

// The node refuses a client certificate from another CA (the client trusts
// the node): Route says so with ErrRefused rather than "no node answered"
// alone, and OnConnState reports it, while a node that accepts the client
// keeps serving it.
func TestNodeRefusingTheCertificateIsReported(t *testing.T) {
	ca := newTestCA(t)
	tn := startNode(t, ca, nil)
	register(t, tn, "b1", "10.0.0.1:10911", 4, "orders")
	foreign := newTestCA(t)
	certPEM, keyPEM, err := foreign.Local().Issue(pki.RoleClient, "stranger", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var states []routeclient.ConnEvent
	c := newClient(t, ca, nodes.Static(tn.Addr()), func(cfg *routeclient.Config) {
		cfg.TLS = pki.ClientConfig(&cert, ca.Local().CAPool, "localhost")
		cfg.OnConnState = func(e routeclient.ConnEvent) {
			mu.Lock()
			states = append(states, e)
			mu.Unlock()
		}
	})
	_, _, err = c.Route(ctxT(t), "orders")
	if !errors.Is(err, routeclient.ErrRefused) {
		t.Fatalf("route with a certificate the node does not trust: %v, want ErrRefused", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(states) == 0 || states[len(states)-1].State != routeclient.StateRefused {
		t.Errorf("connection states %+v, want refused", states)
	}
}
