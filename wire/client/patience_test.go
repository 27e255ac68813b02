package client

import (
	"context"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire/lossyudp"
)

// TestDialWaitsAsLongAsItsContext: a node that stays silent for longer
// than quic-go's default handshake idle timeout (5 s), as a node busy
// with a reconnect storm does while a handshake waits for a slot, is
// still connected to when the dial's context allows it. quic-go gave the
// handshake up after 5 s without a packet, whatever the context said, so
// a patient broker redialled anyway and joined the back of the queue.
// (About 10 s: the silence must outlast quic-go's default, and the
// client's next Initial retransmission comes some 9 s after the first.)
func TestDialWaitsAsLongAsItsContext(t *testing.T) {
	t.Parallel()
	addr, conf := deafPeer(t)
	proxy, err := lossyudp.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.SetDrop(100)
	silence := time.AfterFunc(DefaultDialTimeout+500*time.Millisecond, func() { proxy.SetDrop(0) })
	defer silence.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, proxy.Addr(), Config{TLS: conf})
	if err != nil {
		t.Fatalf("dial with a 30 s context through a node silent for %s: %v", DefaultDialTimeout+500*time.Millisecond, err)
	}
	c.Close()
}

// TestDialKeepsAnExplicitHandshakeIdleTimeout: a QUIC config that sets
// its own handshake idle timeout keeps it; a context shorter than the
// default changes nothing.
func TestDialKeepsAnExplicitHandshakeIdleTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got := patientHandshake(ctx, newQUICConfig(2*time.Second)).HandshakeIdleTimeout; got != 2*time.Second {
		t.Errorf("explicit 2 s: got %s", got)
	}
	if got := patientHandshake(ctx, newQUICConfig(0)).HandshakeIdleTimeout; got < 50*time.Second {
		t.Errorf("1 min context: handshake idle timeout %s, want about a minute", got)
	}
	short, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if got := patientHandshake(short, newQUICConfig(0)).HandshakeIdleTimeout; got != 0 {
		t.Errorf("1 s context: got %s, want quic-go's default (0)", got)
	}
}

func newQUICConfig(handshakeIdle time.Duration) *quic.Config {
	return &quic.Config{HandshakeIdleTimeout: handshakeIdle}
}
