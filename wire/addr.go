package wire

import (
	"fmt"
	"net"
	"strconv"
)

// CheckHostPort reports why addr is not a broker address a client can
// dial, or nil: host:port (an IPv6 host in brackets) with a non-empty
// host and a port of 1 to 65535 in decimal digits. Nodes refuse broker
// addresses (Register.Addr and HAAddr, and the address naming a lease)
// that are not, so brokers can check theirs first (PROTOCOL.md 8).
func CheckHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", addr)
	}
	// Base 10 takes digits only: no sign, no spaces, no underscores.
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%q: port %q is not a number from 1 to 65535", addr, port)
	}
	return nil
}
