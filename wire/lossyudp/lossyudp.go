// Package lossyudp is a UDP proxy on loopback that drops a chosen share of
// datagrams in both directions: a lossy or cut link in front of a node, for
// tests of what crosses a real QUIC connection when packets go missing.
// (Deterministic loss for whole scenarios is node/simtest's simulated
// network; this proxy is for tests that need real sockets.)
package lossyudp

import (
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
	dropPc atomic.Uint32
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
func (p *Proxy) SetDrop(percent uint32) { p.dropPc.Store(min(percent, 100)) }

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

// drop decides whether to drop one datagram going in direction dir, and
// counts it.
func (p *Proxy) drop(dir int) bool {
	pc := p.dropPc.Load()
	if pc > 0 && rand.Uint32N(100) < pc {
		p.dropped[dir].Add(1)
		return true
	}
	return false
}

func (p *Proxy) fromClients() {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.ln.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if p.drop(0) {
			continue
		}
		up := p.upstreamFor(from)
		if up == nil {
			return
		}
		up.Write(buf[:n])
	}
}

func (p *Proxy) upstreamFor(client *net.UDPAddr) *net.UDPConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if up := p.upstream[client.String()]; up != nil {
		return up
	}
	up, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, p.target)
	if err != nil {
		return nil
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
			if !p.drop(1) {
				p.ln.WriteToUDP(buf[:n], client)
			}
		}
	}()
	return up
}
