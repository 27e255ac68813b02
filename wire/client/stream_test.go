package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// TestStreamCallEndsAtItsDeadline: a call to a peer that never answers
// ends at its context's deadline, or at the request timeout when the
// context has none, with context.DeadlineExceeded; a cancelled context
// ends it with context.Canceled. The stream is unusable afterwards.
func TestStreamCallEndsAtItsDeadline(t *testing.T) {
	addr, conf := deafPeer(t)
	c, err := Dial(context.Background(), addr, Config{TLS: conf, RequestTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "t"}}}
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"context deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}, context.DeadlineExceeded},
		{"request timeout", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }, context.DeadlineExceeded},
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	} {
		st, err := c.OpenStream(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := tc.ctx()
		done := make(chan error, 1)
		go func() { var out wire.Routes; done <- st.Call(ctx, wire.TypeGetRoutes, q, &out) }()
		select {
		case err := <-done:
			if !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the call did not end", tc.name)
		}
		cancel()
		if err := st.Call(context.Background(), wire.TypeGetRoutes, q, &wire.Routes{}); err == nil {
			t.Errorf("%s: a call after a failed one succeeded", tc.name)
		}
		st.Close()
	}
}

// TestStreamOutlivesItsCallsDeadlines: a stream idle past the deadline of
// its last call, or whose last call's context is cancelled after the call
// returned, still serves the next call.
func TestStreamOutlivesItsCallsDeadlines(t *testing.T) {
	answer := benchAnswer(t)
	addr, conf := routesPeer(t, answer)
	c, err := Dial(context.Background(), addr, Config{TLS: conf, RequestTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.OpenStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q := &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "rmq_bench_topic_0001"}}}
	var out wire.Routes
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := st.Call(ctx, wire.TypeGetRoutes, q, &out); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		cancel()
		if err := st.Call(context.Background(), wire.TypeGetRoutes, q, &out); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		// Idle past the 500 ms request timeout of the last call, until
		// the stream's timer has set its deadline to end that call.
		idle := time.Now().Add(500 * time.Millisecond)
		waitFor(t, 5*time.Second, func() bool {
			st.wmu.Lock()
			defer st.wmu.Unlock()
			return st.tripped && time.Now().After(idle)
		})
	}
}

// waitFor polls cond every few milliseconds until it holds, failing the
// test after limit.
func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("condition not reached")
		}
	}
}

// TestCallOnceEndsAtItsDeadline: a call on a stream of its own to a peer
// that never answers ends at its context's deadline, or at the request
// timeout, with context.DeadlineExceeded; calls after it, reusing its
// buffers, are not cut short by its deadline.
func TestCallOnceEndsAtItsDeadline(t *testing.T) {
	addr, conf := deafPeer(t)
	deaf, err := Dial(context.Background(), addr, Config{TLS: conf, RequestTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer deaf.Close()
	addr, conf = routesPeer(t, benchAnswer(t))
	good, err := Dial(context.Background(), addr, Config{TLS: conf})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	q := &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "rmq_bench_topic_0001"}}}
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		if err := within(t, func() error { return deaf.CallOnce(ctx, wire.TypeGetRoutes, q, &wire.Routes{}) }); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("round %d, context deadline: %v", i, err)
		}
		cancel()
		if err := within(t, func() error { return deaf.CallOnce(context.Background(), wire.TypeGetRoutes, q, &wire.Routes{}) }); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("round %d, request timeout: %v", i, err)
		}
		// Calls that outlast the 100 ms of the failed ones' deadlines.
		end := time.Now().Add(150 * time.Millisecond)
		for n := 0; n < 10 || time.Now().Before(end); n++ {
			if err := good.CallOnce(context.Background(), wire.TypeGetRoutes, q, &wire.Routes{}); err != nil {
				t.Fatalf("round %d, call %d after a timed-out one: %v", i, n, err)
			}
		}
	}
}

// within runs call, failing the test if it has not returned in 20 s.
func within(t *testing.T, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not end")
		return nil
	}
}
