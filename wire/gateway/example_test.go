package gateway_test

import (
	"context"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/remoting"
)

// A gateway for an edge site: remoting on loopback for the site's brokers
// and clients (their namesrvAddr), QUIC to three nodes with a broker
// credential, metrics and health on an admin address. This is what
// `edgereg gateway` runs.
func Example() {
	cert, pool, err := pki.LoadCredentials("site7-gateway.crt", "site7-gateway.key", "ca.crt")
	if err != nil {
		log.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{
		Nodes: nodes.Static("node1:9876", "node2:9876", "node3:9876"),
		TLS:   pki.ClientConfig(&cert, pool, ""),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer gw.Close() // after the server: brokers keep their leases on the nodes

	ln, err := net.Listen("tcp", "127.0.0.1:9876")
	if err != nil {
		log.Fatal(err)
	}
	srv := &remoting.Server{Handler: gw}
	go srv.Serve(ln)
	go http.ListenAndServe("127.0.0.1:9878", gw.AdminHandler())

	time.Sleep(time.Minute) // serve the site
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
}
