//go:build rocketmq

package gatewaytest

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// udpProxy forwards UDP datagrams between clients and one node on
// loopback, dropping a share of them in both directions: a lossy WAN link,
// or a cut one at 100 %. (The same as wire/broker's test proxy; test files
// cannot share code across packages.)
type udpProxy struct {
	ln     *net.UDPConn
	target *net.UDPAddr
	dropPc atomic.Uint32 // percent of datagrams dropped

	mu       sync.Mutex
	upstream map[string]*net.UDPConn // by client address
	closed   bool
	wg       sync.WaitGroup
}

func newUDPProxy(t *testing.T, target string) *udpProxy {
	t.Helper()
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &udpProxy{ln: ln, target: ta, upstream: make(map[string]*net.UDPConn)}
	p.wg.Add(1)
	go p.fromClients()
	t.Cleanup(p.close)
	return p
}

func (p *udpProxy) addr() string { return p.ln.LocalAddr().String() }

func (p *udpProxy) drop() bool {
	pc := p.dropPc.Load()
	return pc > 0 && rand.Uint32N(100) < pc
}

func (p *udpProxy) fromClients() {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.ln.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if p.drop() {
			continue
		}
		up := p.upstreamFor(from)
		if up == nil {
			return
		}
		up.Write(buf[:n])
	}
}

func (p *udpProxy) upstreamFor(client *net.UDPAddr) *net.UDPConn {
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
			if !p.drop() {
				p.ln.WriteToUDP(buf[:n], client)
			}
		}
	}()
	return up
}

func (p *udpProxy) close() {
	p.mu.Lock()
	p.closed = true
	for _, up := range p.upstream {
		up.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
