package node

import (
	"net"
	"syscall"
)

// setReceiveBuffer asks for a receive buffer of size bytes on udp: forced
// past net.core.rmem_max where the process has CAP_NET_ADMIN, else as
// large as rmem_max allows. It returns the size the kernel grants (the
// kernel reports twice the usable size; this is the usable size).
func setReceiveBuffer(udp *net.UDPConn, size int) (int, error) {
	rc, err := udp.SyscallConn()
	if err != nil {
		return 0, err
	}
	var got int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, size) != nil {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
		}
		v, gerr := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		if serr == nil {
			serr = gerr
		}
		got = v / 2
	}); err != nil {
		return 0, err
	}
	return got, serr
}
