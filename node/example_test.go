package node_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// A node embedded in a Go program: it creates a local CA in its data
// directory on first start, as `edgereg node` does, and the operator
// credential there lets a client on the same machine manage it. Shutdown
// finishes the requests in progress within its context's deadline; the
// data directory keeps the CA and the KV store for the next start.
func Example() {
	dir, err := os.MkdirTemp("", "edgereg-node-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	n, err := node.New(node.Config{
		Addr:      "127.0.0.1:0", // any free UDP port on loopback
		AdminAddr: node.AdminOff, // no /healthz or /metrics listener
		DataDir:   dir,
		WarmUp:    -1, // answer at once: no brokers are coming back after a restart
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve() }()

	cert, roots, err := pki.LocalOperator(dir)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, n.Addr().String(), client.Config{TLS: pki.ClientConfig(&cert, roots, "localhost")})
	if err != nil {
		log.Fatal(err)
	}
	pong, err := c.Ping(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same node:", pong.NodeID == n.ID(), "warming up:", pong.WarmingUp)

	if err := c.KVPut(ctx, "ORDER_TOPIC_CONFIG", "orders", "broker-a:8"); err != nil {
		log.Fatal(err)
	}
	v, err := c.KVGet(ctx, "ORDER_TOPIC_CONFIG", "orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("kv:", v)
	fmt.Println("leases:", n.Status().LeaseCount)
	c.Close()

	if err := n.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("served:", <-served)
	// Output:
	// same node: true warming up: false
	// kv: broker-a:8
	// leases: 0
	// served: node closed
}
