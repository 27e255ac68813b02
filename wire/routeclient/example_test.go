package routeclient_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/routeclient"
)

// exampleNode starts a node on loopback with one broker holding "orders",
// and returns a client credential from the node's local CA.
func exampleNode() (*node.Node, *tls.Config, func()) {
	dir, err := os.MkdirTemp("", "edgereg-example")
	if err != nil {
		panic(err)
	}
	n, err := node.New(node.Config{Addr: "127.0.0.1:0", AdminAddr: node.AdminOff, DataDir: dir, WarmUp: -1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	go n.Serve()
	local, err := pki.EnsureLocal(dir, nil)
	if err != nil {
		panic(err)
	}
	certPEM, keyPEM, err := local.Issue(pki.RoleClient, "example-client", nil, time.Hour)
	if err != nil {
		panic(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		panic(err)
	}
	registerOrders(n, 4)
	return n, pki.ClientConfig(&cert, local.CAPool, "localhost"), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
		os.RemoveAll(dir)
	}
}

// registerOrders stands in for a broker (wire/broker) registering "orders"
// with writeQueues write queues.
func registerOrders(n *node.Node, writeQueues uint32) {
	_, err := n.Registry().Register(registry.Registration{Cluster: "DefaultCluster", BrokerName: "broker-a",
		Addr: "192.0.2.10:10911", DataVersion: wire.DataVersion{Counter: uint64(writeQueues)},
		Topics: []wire.TopicConfig{{Name: "orders", ReadQueues: 4, WriteQueues: writeQueues, Perm: wire.PermRead | wire.PermWrite}}})
	if err != nil {
		panic(err)
	}
}

// A producer finds where a topic lives. In production Nodes lists every
// node (or nodes.DNSSRV finds them) and the client asks two at once,
// merging their answers.
func Example() {
	n, tlsConf, stop := exampleNode()
	defer stop()

	c, err := routeclient.New(routeclient.Config{
		Nodes: nodes.Static(n.Addr().String()),
		TLS:   tlsConf,
		OnConnState: func(e routeclient.ConnEvent) {
			fmt.Println("node", e.State)
		},
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	route, _, err := c.Route(ctx, "orders")
	if err != nil {
		panic(err)
	}
	for i, q := range route.Queues {
		fmt.Printf("%s at %s: %d write queues\n", q.BrokerName, route.Brokers[i].Addrs[wire.MasterID], q.WriteQueues)
	}
	// Output:
	// node connected
	// broker-a at 192.0.2.10:10911: 4 write queues
}

// A consumer watches a topic: the current route comes first, then every
// change within a round trip of the node seeing it.
func ExampleClient_Watch() {
	n, tlsConf, stop := exampleNode()
	defer stop()

	c, err := routeclient.New(routeclient.Config{Nodes: nodes.Static(n.Addr().String()), TLS: tlsConf})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	updates, err := c.Watch(ctx, "orders")
	if err != nil {
		panic(err)
	}
	for u := range updates {
		if u.Err != nil { // every node refused this client: the watch is over
			fmt.Println(u.Err)
			return
		}
		fmt.Printf("%s: %d write queues\n", u.Topic, u.Route.Queues[0].WriteQueues)
		if u.Route.Queues[0].WriteQueues == 8 {
			break
		}
		registerOrders(n, 8) // the broker scales the topic out
	}
	// Output:
	// orders: 4 write queues
	// orders: 8 write queues
}
