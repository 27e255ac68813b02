//go:build !linux

package node

import "net"

// setReceiveBuffer asks for a receive buffer of size bytes on udp; off
// Linux the size granted is not read back, so it reports size.
func setReceiveBuffer(udp *net.UDPConn, size int) (int, error) {
	return size, udp.SetReadBuffer(size)
}
