package broker_test

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
	"github.com/edgereg/edgereg/wire/broker"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
)

// exampleNode starts a real node on loopback with a local CA in a
// temporary directory, and returns its address, a broker credential for
// group broker-a from its CA, and a function that stops it.
func exampleNode() (addr string, conf *tls.Config, stop func()) {
	dir, err := os.MkdirTemp("", "edgereg-example-")
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
	certPEM, keyPEM, err := ca.Issue(pki.RoleBroker, "broker-a", []string{"broker-a"}, time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		log.Fatal(err)
	}
	return n.Addr().String(), pki.ClientConfig(&cert, ca.CAPool, "localhost"), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Shutdown(ctx)
		<-served
		os.RemoveAll(dir)
	}
}

// A broker registers with every node, waits until each has acknowledged,
// changes a topic, and unregisters when its context ends. Run may start
// after WaitSynced is called: WaitSynced waits for it.
func Example() {
	addr, conf, stopNode := exampleNode()
	defer stopNode()

	r, err := broker.New(broker.Config{
		Identity: broker.Identity{Cluster: "DefaultCluster", BrokerName: "broker-a",
			BrokerID: wire.MasterID, Addr: "10.0.0.1:10911"},
		Topics: []wire.TopicConfig{{Name: "orders", ReadQueues: 8, WriteQueues: 8,
			Perm: wire.PermRead | wire.PermWrite}},
		Nodes:  nodes.Static(addr),
		TLS:    conf,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }() // until ctx ends; then unregisters everywhere

	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := r.WaitSynced(wctx); err != nil {
		log.Fatal(err)
	}
	for _, n := range r.Nodes() {
		fmt.Println("registered:", n.Registered, "registrations:", n.Registrations)
	}

	// A topic change reaches every node as a small update.
	if err := r.UpsertTopics(wire.TopicConfig{Name: "payments", ReadQueues: 4, WriteQueues: 4,
		Perm: wire.PermRead | wire.PermWrite}); err != nil {
		log.Fatal(err)
	}
	if err := r.WaitSynced(wctx); err != nil {
		log.Fatal(err)
	}
	for _, n := range r.Nodes() {
		fmt.Println("updates:", n.Updates, "data version counter:", n.DataVersion.Counter)
	}

	cancel()
	fmt.Println("unregistered:", <-done == nil)
	// Output:
	// registered: true registrations: 1
	// updates: 1 data version counter: 1
	// unregistered: true
}

// A broker whose certificate does not allow its group is refused for
// good: WaitSynced returns the refusal, OnStateChange reports it, and Run
// returns the nodes' messages instead of retrying for ever.
func Example_refused() {
	addr, conf, stopNode := exampleNode() // a credential for group broker-a only
	defer stopNode()
	refused := make(chan string, 1)

	r, err := broker.New(broker.Config{
		Identity: broker.Identity{Cluster: "DefaultCluster", BrokerName: "broker-b",
			Addr: "10.0.0.2:10911"},
		Nodes:  nodes.Static(addr),
		TLS:    conf,
		Logger: slog.New(slog.DiscardHandler),
		OnStateChange: func(st broker.NodeState) {
			if st.Refused != nil {
				refused <- st.Addr
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.WaitSynced(ctx)
	fmt.Println("WaitSynced refused:", errors.Is(err, broker.ErrRefused), "not authorized:", errors.Is(err, wire.ErrNotAuthorized))
	err = <-done
	var re *broker.RefusedError
	fmt.Println("Run refused:", errors.As(err, &re), "op:", re.Op)
	fmt.Println("OnStateChange told of the node that refused:", <-refused == addr)
	// Output:
	// WaitSynced refused: true not authorized: true
	// Run refused: true op: register
	// OnStateChange told of the node that refused: true
}
