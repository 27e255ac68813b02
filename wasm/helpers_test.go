package wasm

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// cacheDir is one compilation cache for every test run, so each module is
// compiled once however many hosts the tests start, and not again on the
// next run: compiling a 2 MB Go module under -race takes seconds. wazero
// keys its cache by its own version and the module's hash, so sharing the
// directory between runs is safe.
var cacheDir = func() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "edgereg", "wasm-test-cache")
}()

func testdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "wasm", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newHost starts a host with a generous call timeout: tests run under
// -race on small machines, and only the timeout tests want it short.
func newHost(t testing.TB, cfg HostConfig) *Host {
	t.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = cacheDir
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h, err := NewHost(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

func load(t testing.TB, h *Host, name string) *Module {
	t.Helper()
	m, err := h.Validate(context.Background(), testdata(t, name))
	if err != nil {
		t.Fatalf("validate %s: %v", name, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newSet(t testing.TB, h *Host, cfg SetConfig) *Set {
	t.Helper()
	if cfg.Rand == nil {
		cfg.Rand = func() uint64 { return 42 } // never the dry-run sample's
	}
	s, err := NewSet(context.Background(), h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// zonedRoute is a route over three zones with a masterless group.
func zonedRoute() wire.Route {
	rw := wire.PermRead | wire.PermWrite
	return wire.Route{
		Queues: []wire.QueueData{
			{BrokerName: "a", ReadQueues: 4, WriteQueues: 4, Perm: rw},
			{BrokerName: "b", ReadQueues: 4, WriteQueues: 4, Perm: rw},
			{BrokerName: "c", ReadQueues: 4, Perm: wire.PermRead},
			{BrokerName: "d", ReadQueues: 2, WriteQueues: 2, Perm: rw},
		},
		Brokers: []wire.BrokerData{
			{Cluster: "C", Name: "a", Zone: "east", Addrs: map[int64]string{0: "10.0.0.1:1", 1: "10.0.0.2:1"}},
			{Cluster: "C", Name: "b", Zone: "west", Addrs: map[int64]string{0: "10.0.1.1:1"}},
			{Cluster: "C", Name: "c", Zone: "west", Addrs: map[int64]string{1: "10.0.1.2:1"}},
			{Cluster: "C", Name: "d", Addrs: map[int64]string{0: "10.0.2.1:1"}},
		},
	}
}

func encode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func names(r wire.Route) (queues, brokers []string) {
	for _, q := range r.Queues {
		queues = append(queues, q.BrokerName)
	}
	for _, b := range r.Brokers {
		brokers = append(brokers, b.Name)
	}
	return queues, brokers
}
