package nodes_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/nodes"
)

// manyAddrs returns n distinct node addresses.
func manyAddrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.%d.%d.%d:9876", i>>16&0xff, i>>8&0xff, i&0xff)
	}
	return out
}

// TestHTTPRefusesMoreNodesThanMaxNodes: an address service (or whoever
// answers its URL) decides how many nodes every broker registrar and route
// client dials; 64 KiB of short entries is thousands of addresses, each a
// QUIC connection per broker behind a gateway. A list past MaxNodes is
// refused whole, like a malformed one, so the last good list stands.
func TestHTTPRefusesMoreNodesThanMaxNodes(t *testing.T) {
	body := strings.Join(manyAddrs(nodes.MaxNodes+1), ";")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(body)) }))
	t.Cleanup(srv.Close)
	t.Cleanup(srv.Client().CloseIdleConnections)
	got, err := nodes.HTTP(srv.URL, srv.Client()).Nodes(context.Background())
	if err == nil {
		t.Fatalf("a list of %d nodes (limit %d) was accepted: %d addresses", nodes.MaxNodes+1, nodes.MaxNodes, len(got))
	}
	if !strings.Contains(err.Error(), "at most") {
		t.Errorf("error does not say the limit: %v", err)
	}
	body = strings.Join(manyAddrs(nodes.MaxNodes), ";")
	if got, err := nodes.HTTP(srv.URL, srv.Client()).Nodes(context.Background()); err != nil || len(got) != nodes.MaxNodes {
		t.Errorf("a list of exactly MaxNodes: %d addresses, %v", len(got), err)
	}
}

// TestFollowRefusesMoreNodesThanMaxNodes: whatever the source (a DNS name
// with thousands of records), Follow keeps the last good list rather than
// apply one past MaxNodes.
func TestFollowRefusesMoreNodesThanMaxNodes(t *testing.T) {
	src := &flaky{addrs: []string{"a:1"}}
	applied := make(chan []string, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		nodes.Follow(ctx, src, nodes.FollowConfig{Interval: 5 * time.Millisecond, Backoff: nodes.Backoff{Min: time.Millisecond}},
			func(a []string) { applied <- a })
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-applied:
	case <-time.After(30 * time.Second):
		t.Fatal("no list applied")
	}
	src.set(manyAddrs(nodes.MaxNodes+1), nil)
	calls := src.count()
	for src.count() < calls+3 {
		time.Sleep(time.Millisecond)
	}
	src.set([]string{"b:1"}, nil)
	for {
		select {
		case a := <-applied:
			if len(a) > nodes.MaxNodes {
				t.Fatalf("a list of %d nodes was applied (limit %d)", len(a), nodes.MaxNodes)
			}
			if slices.Equal(a, []string{"b:1"}) {
				return
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the next good list was not applied")
		}
	}
}
