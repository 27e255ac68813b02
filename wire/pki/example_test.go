package pki_test

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/edgereg/edgereg/wire/pki"
)

// A data directory's local CA issues a broker credential limited to one
// broker group. The role and the groups travel in the certificate, so a
// node knows who is asking from the handshake alone.
func ExampleLocal_Issue() {
	dir, err := os.MkdirTemp("", "edgereg-pki-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ca, err := pki.EnsureLocal(dir, nil) // creates dir/tls on first use, loads it after
	if err != nil {
		log.Fatal(err)
	}
	certPEM, _, err := ca.Issue(pki.RoleBroker, "broker-a-0", []string{"broker-a"}, 24*time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		log.Fatal(err)
	}
	id, err := pki.IdentityFromCert(cert)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id.Role, id.Name, id.BrokerGroups)
	fmt.Println("may register broker-a:", id.MayRegisterGroup("broker-a"))
	fmt.Println("may register broker-b:", id.MayRegisterGroup("broker-b"))
	// Output:
	// broker broker-a-0 [broker-a]
	// may register broker-a: true
	// may register broker-b: false
}
