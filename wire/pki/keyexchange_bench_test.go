package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
)

// BenchmarkHandshake is one full TLS 1.3 handshake with client
// certificates between a node's server config and a Go client, over an
// in-memory pipe, for each KeyExchange: client and server CPU together
// (the cost a storm bench pays twice over on one machine).
func BenchmarkHandshake(b *testing.B) {
	dataDir := b.TempDir()
	l, err := EnsureLocal(dataDir, nil)
	if err != nil {
		b.Fatal(err)
	}
	opCert, pool, err := LocalOperator(dataDir)
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range []KeyExchange{KeyExchangeHybrid, KeyExchangeX25519} {
		b.Run(string(k), func(b *testing.B) {
			r, err := NewReloader(ServerCredentials{Cert: l.Node, ClientCAs: []*x509.Certificate{l.CA}, KeyExchange: k})
			if err != nil {
				b.Fatal(err)
			}
			srvConf := r.TLSConfig()
			cliConf := ClientConfig(&opCert, pool, "")
			cliConf.ClientSessionCache = nil // every handshake a full one, as in a storm
			b.ReportAllocs()
			for b.Loop() {
				c1, c2 := net.Pipe()
				done := make(chan error, 1)
				go func() {
					srv := tls.Server(c1, srvConf)
					err := srv.Handshake()
					if err == nil {
						_, err = srv.Write([]byte{1}) // after the session ticket
					}
					done <- err
				}()
				cli := tls.Client(c2, cliConf)
				if err := cli.Handshake(); err != nil {
					b.Fatal(err)
				}
				if _, err := cli.Read(make([]byte, 1)); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				c1.Close()
				c2.Close()
			}
		})
	}
}
