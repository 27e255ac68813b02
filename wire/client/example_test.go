package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// exampleNode starts a real node on loopback with a local CA in a
// temporary directory. It returns the node's address, a function that
// issues a credential of a role from that CA, and one that stops it all.
func exampleNode() (addr string, credential func(role pki.Role, name string, groups ...string) *tls.Config, stop func()) {
	dir, err := os.MkdirTemp("", "edgereg-client-example-")
	if err != nil {
		log.Fatal(err)
	}
	ca, err := pki.EnsureLocal(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	n, err := node.New(node.Config{Addr: "127.0.0.1:0", AdminAddr: node.AdminOff, DataDir: dir,
		WarmUp: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve() }()
	credential = func(role pki.Role, name string, groups ...string) *tls.Config {
		certPEM, keyPEM, err := ca.Issue(role, name, groups, time.Hour)
		if err != nil {
			log.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			log.Fatal(err)
		}
		return pki.ClientConfig(&cert, ca.CAPool, "localhost")
	}
	return n.Addr().String(), credential, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Shutdown(ctx)
		<-served
		os.RemoveAll(dir)
	}
}

// A broker registers a topic on one connection; a client on another reads
// its route, then polls with the version it holds and is answered "not
// modified", with no route bytes. A topic nobody holds is a *wire.Error
// with CodeNotFound. (Applications usually want package routeclient,
// which does this against every node, caches and watches.)
func Example() {
	addr, credential, stop := exampleNode()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	b, err := client.Dial(ctx, addr, client.Config{TLS: credential(pki.RoleBroker, "broker-a", "broker-a")})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Register(ctx, &wire.Register{Cluster: "DefaultCluster", BrokerName: "broker-a",
		BrokerID: wire.MasterID, Addr: "10.0.0.1:10911", DataVersion: wire.DataVersion{Timestamp: 1, Counter: 1},
		Topics: []wire.TopicConfig{{Name: "orders", ReadQueues: 8, WriteQueues: 8, Perm: wire.PermRead | wire.PermWrite}},
	}); err != nil {
		log.Fatal(err)
	}

	c, err := client.Dial(ctx, addr, client.Config{TLS: credential(pki.RoleClient, "shop-frontend")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	route, version, err := c.Route(ctx, "orders", wire.ClientAttrs{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("orders on", route.Brokers[0].Addrs[wire.MasterID], "with", route.Queues[0].WriteQueues, "write queues")

	// Polling: name the version held; an unchanged route costs no bytes.
	rs, err := c.GetRoutes(ctx, &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "orders", Version: version}}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("poll:", rs.Results[0].Status, "route bytes:", len(rs.Results[0].Route))

	_, _, err = c.Route(ctx, "payments", wire.ClientAttrs{})
	var we *wire.Error
	fmt.Println("payments not found:", errors.As(err, &we) && we.Code == wire.CodeNotFound)
	// Output:
	// orders on 10.0.0.1:10911 with 8 write queues
	// poll: not-modified route bytes: 0
	// payments not found: true
}
