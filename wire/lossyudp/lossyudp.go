// Package lossyudp is a UDP proxy on loopback that drops a chosen share of
// datagrams in each direction, duplicates some, and drops those larger
// than a path MTU: a lossy, asymmetric or cut link in front of a node, for
// tests of what crosses a real QUIC connection when packets go missing.
// (Deterministic loss for whole scenarios is node/simtest's simulated
// network; this proxy is for tests that need real sockets.)
package lossyudp

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards datagrams between its clients and one target, each client
// on an upstream socket of its own so the target sees one peer per client.
type Proxy struct {
	ln     *net.UDPConn
	target *net.UDPAddr
	// dropPc is the percent dropped: [0] toward the target, [1] toward
	// the clients.
	dropPc [2]atomic.Uint32
	dupPc  atomic.Uint32 // percent of forwarded datagrams sent twice
	mtu    atomic.Uint32 // largest datagram forwarded; 0: no limit
	// dropped counts datagrams dropped: [0] toward the target, [1] toward
	// the clients.
	dropped [2]atomic.Uint64

	mu       sync.Mutex
	upstream map[string]*net.UDPConn // by client address
	closed   bool
	wg       sync.WaitGroup
}

// New starts a proxy on 127.0.0.1 in front of target ("host:port"),
// dropping nothing until SetDrop says otherwise.
func New(target string) (*Proxy, error) {
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, fmt.Errorf("lossyudp: target %q: %w", target, err)
	}
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("lossyudp: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: ta, upstream: make(map[string]*net.UDPConn)}
	p.wg.Add(1)
	go p.fromClients()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.LocalAddr().String() }

// SetDrop sets the percent of datagrams dropped in each direction, from 0
// (none) to 100 (the link is cut).
func (p *Proxy) SetDrop(percent uint32) { p.SetDropEach(percent, percent) }

// SetDropEach sets the percent dropped toward the target and toward the
// clients apart: an asymmetric link.
func (p *Proxy) SetDropEach(toTarget, toClients uint32) {
	p.dropPc[0].Store(min(toTarget, 100))
	p.dropPc[1].Store(min(toClients, 100))
}

// SetDuplicate sets the percent of forwarded datagrams sent twice.
func (p *Proxy) SetDuplicate(percent uint32) { p.dupPc.Store(min(percent, 100)) }

// SetMTU drops, both ways, every datagram whose payload exceeds n bytes (0:
// no limit), as a path whose MTU shrank does: 1252 is QUIC's minimum
// (1280-byte IPv4 packets). Such drops count in Dropped.
func (p *Proxy) SetMTU(n uint32) { p.mtu.Store(n) }

// Dropped reports how many datagrams were dropped toward the target and
// toward the clients.
func (p *Proxy) Dropped() (toTarget, toClients uint64) {
	return p.dropped[0].Load(), p.dropped[1].Load()
}

// Close stops forwarding and waits for the proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for _, up := range p.upstream {
		up.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// drop decides whether to drop one datagram of n bytes going in direction
// dir, and counts it.
func (p *Proxy) drop(dir, n int) bool {
	pc := p.dropPc[dir].Load()
	if mtu := p.mtu.Load(); (mtu > 0 && n > int(mtu)) || (pc > 0 && rand.Uint32N(100) < pc) {
		p.dropped[dir].Add(1)
		return true
	}
	return false
}

// copies is how many times to send a datagram not dropped: 1 or 2.
func (p *Proxy) copies() int {
	if pc := p.dupPc.Load(); pc > 0 && rand.Uint32N(100) < pc {
		return 2
	}
	return 1
}

func (p *Proxy) fromClients() {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.ln.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if p.drop(0, n) {
			continue
		}
		up, err := p.upstreamFor(from)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue // this client's datagram is lost; the others still pass
		}
		for range p.copies() {
			up.Write(buf[:n])
		}
	}
}

// upstreamFor returns client's upstream socket, opening it on first use;
// net.ErrClosed once the proxy is closed.
func (p *Proxy) upstreamFor(client *net.UDPAddr) (*net.UDPConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, net.ErrClosed
	}
	if up := p.upstream[client.String()]; up != nil {
		return up, nil
	}
	up, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, p.target)
	if err != nil {
		return nil, fmt.Errorf("lossyudp: upstream for %s: %w", client, err)
	}
	p.upstream[client.String()] = up
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			if p.drop(1, n) {
				continue
			}
			for range p.copies() {
				p.ln.WriteToUDP(buf[:n], client)
			}
		}
	}()
	return up, nil
}
