package node

import (
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestUDPReceiveBuffer: the node's socket gets a receive buffer that a
// connection storm's Initials fit in. At quic-go's own 7 MiB, 10,000
// brokers dialling at once overflowed it (20,340 and 2,591 datagrams
// dropped in two storms, each costing a broker a doubling retransmission
// timer), none at 32 MiB.
func TestUDPReceiveBuffer(t *testing.T) {
	const want = 32 << 20 // the default
	tn := startNode(t, nil)
	udp, ok := tn.udp.(*net.UDPConn)
	if !ok {
		t.Fatalf("node socket is a %T", tn.udp)
	}
	rc, err := udp.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	rc.Control(func(fd uintptr) {
		v, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		if err != nil {
			t.Error(err)
		}
		got = v / 2
	})
	floor := want
	if os.Geteuid() != 0 { // cannot force past net.core.rmem_max
		floor = min(want, rmemMax(t))
	}
	if got < floor {
		t.Fatalf("UDP receive buffer %d bytes, want at least %d", got, floor)
	}
}

func rmemMax(t *testing.T) int {
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Skipf("no rmem_max to compare with: %v", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return v
}
