package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// TestWriteTimeoutResetsStream is issue 10's item 10 (§4.3): a peer that
// pipelines requests and stops reading must get its stream reset with
// code 0x20 at the write timeout, not a FIN that silently drops the
// requests not yet answered.
func TestWriteTimeoutResetsStream(t *testing.T) {
	tn := startNode(t, func(c *Config) {
		c.WriteTimeout = 300 * time.Millisecond
		c.ReadTimeout = 2 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A route of many broker groups, so the answers outgrow the client's
	// flow-control window quickly.
	for g := range 60 {
		r := registration("c1", fmt.Sprintf("group-with-a-long-name-%02d", g), 0, fmt.Sprintf("10.0.%d.1:10911", g), "big")
		if _, err := tn.reg.Register(toRegistration(r)); err != nil {
			t.Fatal(err)
		}
	}
	qc, err := quic.DialAddr(ctx, tn.Addr().String(), tn.tlsFor(pki.RoleClient, "stalled"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer qc.CloseWithError(0, "")
	s, err := qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const requests = 3000
	var buf []byte
	for i := range requests {
		f, err := wire.NewRequest(wire.TypeGetRoutes, uint64(i+1), &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "big"}}})
		if err != nil {
			t.Fatal(err)
		}
		if buf, err = wire.AppendFrame(buf, f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Write(buf); err != nil {
		t.Fatal(err)
	}
	// Stop reading until the node has given up writing (or for long
	// enough that it should have).
	for wait := time.Now().Add(5 * time.Second); testutil.ToFloat64(tn.stats.timeouts) == 0 && time.Now().Before(wait); {
		time.Sleep(20 * time.Millisecond)
	}
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	answered := 0
	for {
		f, err := wire.ReadFrame(s, wire.MaxFrameLen)
		if err == nil {
			if f.Error != nil {
				t.Fatalf("response %d: %v", f.ID, f.Error)
			}
			answered++
			continue
		}
		var se *quic.StreamError
		switch {
		case errors.As(err, &se) && se.ErrorCode == codeStreamTimeout:
			t.Logf("%d of %d requests answered, then the stream was reset with 0x20", answered, requests)
			return
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			t.Fatalf("the node ended the stream with a FIN after %d of %d answers: the other requests were dropped silently", answered, requests)
		default:
			t.Fatalf("after %d answers: %v, want a reset with code 0x20", answered, err)
		}
	}
}

// TestInvalidNamesRefusedEverywhere (§8.5, §8.14): get-routes refuses an
// invalid topic name with code 1 as watch does, and every KV operation
// checks namespace and key as put does.
func TestInvalidNamesRefusedEverywhere(t *testing.T) {
	tn := startNode(t, nil)
	ctx := ctxT(t)
	c := tn.dial(pki.RoleClient)
	long := strings.Repeat("k", 300)
	for _, topic := range []string{"bad topic!", "", strings.Repeat("t", 128)} {
		q := &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "fine"}, {Topic: topic}}}
		if _, err := c.GetRoutes(ctx, q); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("get-routes of %q = %v, want code 1", topic, err)
		}
		p, err := c.OpenPipe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Call(ctx, wire.TypeWatch, &wire.Watch{Topics: []wire.TopicVersion{{Topic: topic}}}, nil); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("watch of %q = %v, want code 1", topic, err)
		}
		p.Close()
	}
	op := tn.dial(pki.RoleOperator)
	calls := map[string]func() error{
		"kv-get long key":        func() error { _, err := op.KVGet(ctx, "ns", long); return err },
		"kv-get long namespace":  func() error { _, err := op.KVGet(ctx, long, "k"); return err },
		"kv-get empty key":       func() error { _, err := op.KVGet(ctx, "ns", ""); return err },
		"kv-delete long key":     func() error { return op.KVDelete(ctx, "ns", long) },
		"kv-delete empty key":    func() error { return op.KVDelete(ctx, "ns", "") },
		"kv-list long namespace": func() error { _, err := op.KVList(ctx, long); return err },
		"kv-list empty":          func() error { _, err := op.KVList(ctx, ""); return err },
		"kv-put long key":        func() error { return op.KVPut(ctx, "ns", long, "v") },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("%s = %v, want code 1", name, err)
		}
	}
}
