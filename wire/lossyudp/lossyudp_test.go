package lossyudp_test

import (
	"net"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/lossyudp"
)

// echo answers every datagram with the same bytes.
func echo(t *testing.T) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			c.WriteToUDP(buf[:n], from)
		}
	}()
	return c.LocalAddr().String()
}

// TestForwardsAndDrops: datagrams reach the target and come back while
// nothing is dropped; at 100 % none does, and every one is counted.
func TestForwardsAndDrops(t *testing.T) {
	p, err := lossyudp.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("udp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 16)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("through the proxy: %q, %v", buf[:n], err)
	}
	p.SetDrop(100)
	for range 10 {
		c.Write([]byte("lost"))
	}
	deadline := time.Now().Add(10 * time.Second)
	for toTarget, _ := p.Dropped(); toTarget < 10; toTarget, _ = p.Dropped() {
		if time.Now().After(deadline) {
			t.Fatalf("dropped %d of 10 datagrams at 100 %%", toTarget)
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("a datagram crossed a cut link: %q", buf[:n])
	}
}

// TestBadTarget is refused with the target named.
func TestBadTarget(t *testing.T) {
	if _, err := lossyudp.New("no-port"); err == nil {
		t.Fatal("a target without a port was accepted")
	}
}

// TestOneWayMTUAndDuplicates: a link cut toward the clients only still
// carries datagrams to the target (counted there), a datagram over the
// MTU is dropped while a small one passes, and at 100 % duplication each
// datagram arrives twice.
func TestOneWayMTUAndDuplicates(t *testing.T) {
	p, err := lossyudp.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("udp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4096)
	roundTrip := func(msg []byte) (int, error) {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		c.Write(msg)
		return c.Read(buf)
	}
	p.SetDropEach(0, 100)
	if _, err := roundTrip([]byte("one way")); err == nil {
		t.Fatal("an echo came back over a link cut toward the clients")
	}
	if up, down := p.Dropped(); up != 0 || down != 1 {
		t.Fatalf("dropped %d toward the target and %d toward the client, want 0 and 1", up, down)
	}
	p.SetDropEach(0, 0)
	p.SetMTU(1252)
	if _, err := roundTrip(make([]byte, 1300)); err == nil {
		t.Fatal("a 1300-byte datagram crossed a 1252-byte MTU")
	}
	if n, err := roundTrip(make([]byte, 1200)); err != nil || n != 1200 {
		t.Fatalf("a 1200-byte datagram under the MTU: %d bytes, %v", n, err)
	}
	p.SetMTU(0)
	p.SetDuplicate(100)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte("twice"))
	got := 0
	for got < 4 { // duplicated on the way there and on the way back
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != "twice" {
			t.Fatalf("after %d copies: %q, %v", got, buf[:n], err)
		}
		got++
	}
}
