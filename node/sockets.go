package node

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// sockets are the node's listening sockets, bound by New before it writes
// anything to the data directory: a node that cannot bind (a port in use,
// an address it may not take) fails leaving the directory as it found it,
// with no CA, node id or keys that nobody asked for. The parts of New that
// serve a socket take it from here instead of binding their own.
type sockets struct {
	udp net.PacketConn // nil once taken, or when Config.PacketConn is used
	tcp []boundTCP     // the TCP listeners not yet taken, in binding order
}

// boundTCP is one pre-bound TCP listener and the address it was asked for.
type boundTCP struct {
	addr string
	ln   net.Listener
}

// bindSockets binds every socket cfg names: the QUIC port, the remoting
// listener and the admin and status HTTP addresses.
func bindSockets(cfg Config) (*sockets, error) {
	s := &sockets{}
	if cfg.PacketConn == nil {
		udp, err := listenUDP(cfg)
		if err != nil {
			return nil, err
		}
		s.udp = udp
	}
	var tcp [][2]string // flag, address
	if cfg.RemotingAddr != "" {
		tcp = append(tcp, [2]string{"remoting-addr", remotingListenAddr(cfg.RemotingAddr)})
	}
	if cfg.AdminAddr != AdminOff {
		tcp = append(tcp, [2]string{"admin-addr", cfg.AdminAddr})
	}
	if st := statusAddr(cfg); st != AdminOff && (cfg.AdminAddr == AdminOff || !sharesAdmin(cfg)) {
		tcp = append(tcp, [2]string{"status-addr", st})
	}
	for _, t := range tcp {
		ln, err := net.Listen("tcp", t[1])
		if err != nil {
			s.close()
			return nil, bindError(t[0], t[1], err)
		}
		s.tcp = append(s.tcp, boundTCP{t[1], ln})
	}
	return s, nil
}

// listenTCP hands over the listener bound for addr, or binds one when none
// was (a node whose settings changed between binding and use: none today).
func (s *sockets) listenTCP(addr string) (net.Listener, error) {
	for i, b := range s.tcp {
		if b.addr == addr {
			s.tcp = append(s.tcp[:i], s.tcp[i+1:]...)
			return b.ln, nil
		}
	}
	return net.Listen("tcp", addr)
}

// close closes the sockets not taken, for a node that failed to start.
func (s *sockets) close() {
	if s.udp != nil {
		s.udp.Close()
		s.udp = nil
	}
	for _, b := range s.tcp {
		b.ln.Close()
	}
	s.tcp = nil
}

// listenUDP binds the node's QUIC socket and asks for its receive buffer.
func listenUDP(cfg Config) (net.PacketConn, error) {
	udpAddr, err := net.ResolveUDPAddr("udp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen address %s: %w", cfg.Addr, err)
	}
	udp, err := net.ListenUDP("udp", udpAddr)
	if err != nil {
		return nil, bindError("addr", cfg.Addr, err)
	}
	if got, err := setReceiveBuffer(udp, cfg.UDPReceiveBuffer); err != nil || got < cfg.UDPReceiveBuffer {
		cfg.Logger.Warn("UDP receive buffer smaller than asked: a connection storm may drop Initials; raise net.core.rmem_max or grant CAP_NET_ADMIN",
			"asked", cfg.UDPReceiveBuffer, "got", got, "err", errString(err))
	}
	return udp, nil
}

// bindError names the setting whose address could not be bound and, for
// an address in use, what to do about it.
func bindError(flag, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("--%s %s: %w (another process, perhaps another node, holds it: stop it or choose another --%s)", flag, addr, err, flag)
	}
	return fmt.Errorf("--%s %s: %w", flag, addr, err)
}
