package node

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// sendPartOfAFrame opens a stream on qc and sends 40 KiB of a frame that
// declares size bytes: the node's buffer for it has grown to size, which
// it holds of the byte budget until the frame is done or the stream ends.
func sendPartOfAFrame(t *testing.T, ctx context.Context, qc *quic.Conn, size uint32) *quic.Stream {
	t.Helper()
	s, err := qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, wire.FrameHeaderLen+40<<10)
	binary.BigEndian.PutUint32(msg, size)
	if _, err := s.Write(msg); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDeclaredFrameLengthAllocatesNothing is issue 10's item 2: 8
// connections x 100 streams, each sending only a header that declares a
// 1 MiB frame (3,200 bytes on the wire in all), must not make the node
// allocate what the headers declare; other clients are served meanwhile.
func TestDeclaredFrameLengthAllocatesNothing(t *testing.T) {
	const (
		conns    = 8
		streams  = 100
		declared = 1 << 20
		maxGrown = 64 << 20
	)
	tn := startNode(t, func(c *Config) { c.ReadTimeout = time.Minute })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := tn.reg.Register(toRegistration(registration("c1", "g1", 0, "10.0.0.1:10911", "t"))); err != nil {
		t.Fatal(err)
	}
	reader := tn.dial(pki.RoleClient)
	if _, _, err := reader.Route(ctx, "t", wire.ClientAttrs{}); err != nil {
		t.Fatal(err)
	}

	base := liveHeap()
	var hdr [wire.FrameHeaderLen]byte
	binary.BigEndian.PutUint32(hdr[:], declared)
	for range conns {
		qc, err := quic.DialAddr(ctx, tn.Addr().String(), tn.tlsFor(pki.RoleClient, "attacker"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qc.CloseWithError(0, "") })
		for range streams {
			s, err := qc.OpenStreamSync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Write(hdr[:]); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Every stream is being served once the node counts them all; the
	// headers are read right after.
	for tn.stats.streams.Load() < conns*streams {
		if ctx.Err() != nil {
			t.Fatalf("the node serves %d streams, want %d", tn.stats.streams.Load(), conns*streams)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var grown uint64
	for range 20 { // the stall lasts the read timeout, a minute
		if h := liveHeap(); h > base {
			grown = max(grown, h-base)
		}
		if grown >= maxGrown {
			break
		}
		if _, _, err := reader.Route(ctx, "t", wire.ClientAttrs{}); err != nil {
			t.Fatalf("another client's read during the stall: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("heap grew by %.1f MiB while %d streams each declared a %d-byte frame", float64(grown)/(1<<20), conns*streams, declared)
	if grown >= maxGrown {
		t.Fatalf("heap grew by %d MiB during the stall, want < %d MiB", grown>>20, maxGrown>>20)
	}
}

// TestBytesInFlightBudget: a sender holding the node's whole budget of
// bytes in flight delays other frames, never past its own read timeout:
// it is reset with 0x20, its budget comes back, and the others are served.
func TestBytesInFlightBudget(t *testing.T) {
	const limit = 64 << 10
	const readTimeout = 2 * time.Second
	tn := startNode(t, func(c *Config) {
		c.MaxRequestLen, c.MaxBrokerFrameLen, c.MaxBytesInFlight = limit, limit, limit
		c.ReadTimeout = readTimeout
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, tn.Addr().String(), tn.tlsFor(pki.RoleClient, "hog"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer qc.CloseWithError(0, "")
	s := sendPartOfAFrame(t, ctx, qc, limit)
	for tn.inFlight.used.Load() < limit {
		if ctx.Err() != nil {
			t.Fatalf("the node holds %d bytes in flight, want %d", tn.inFlight.used.Load(), limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The ping starts half a read timeout after the hog took the budget, so
	// the hog's timeout (which frees the budget) comes well before the
	// ping's own, however slowly this machine schedules them.
	other := tn.dial(pki.RoleClient)
	time.Sleep(readTimeout / 2)
	if _, err := other.Ping(ctx); err != nil {
		t.Fatalf("a ping waiting for budget: %v", err)
	}
	var buf [1]byte
	_, err = s.Read(buf[:])
	var se *quic.StreamError
	if !errors.As(err, &se) || se.ErrorCode != codeStreamTimeout {
		t.Fatalf("the stream holding the budget ended with %v, want a reset with 0x20", err)
	}
	for tn.inFlight.used.Load() != 0 {
		if ctx.Err() != nil {
			t.Fatalf("%d bytes in flight left after every frame ended", tn.inFlight.used.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
