package wasm

import (
	"context"
	"fmt"
	"testing"

	"github.com/edgereg/edgereg/wire"
)

// bigRoute is a route of 12 broker groups in 2 zones, about 1 KB encoded.
func bigRoute(b *testing.B) []byte {
	var r wire.Route
	for i := range 12 {
		name := fmt.Sprintf("broker-%02d", i)
		r.Queues = append(r.Queues, wire.QueueData{BrokerName: name, ReadQueues: 16, WriteQueues: 16, Perm: 6})
		r.Brokers = append(r.Brokers, wire.BrokerData{
			Cluster: "DefaultCluster", Name: name, Zone: fmt.Sprint("zone-", i%2),
			Addrs: map[int64]string{0: fmt.Sprintf("10.0.%d.1:10911", i), 1: fmt.Sprintf("10.0.%d.2:10911", i)},
		})
	}
	body := encode(b, &r)
	b.Logf("route: %d bytes", len(body))
	return body
}

func BenchmarkRouteFilter(b *testing.B) {
	h := newHost(b, HostConfig{})
	zone := load(b, h, "zone-affinity.wasm")
	route := bigRoute(b)
	client := wire.ClientAttrs{Zone: "zone-0", Labels: map[string]string{"app": "orders"}}
	ctx := context.Background()
	run := func(b *testing.B, s *Set, version func(i int) uint64) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, _, err := s.RouteFilter(ctx, "10.1.1.1", client, "TopicA", version(i), route); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(s.fallbacks.Load()), "fallbacks")
	}
	b.Run("none", func(b *testing.B) {
		run(b, newSet(b, h, SetConfig{}), func(int) uint64 { return 1 })
	})
	b.Run("memoized", func(b *testing.B) {
		s := newSet(b, h, SetConfig{})
		activate(b, s, HookRouteFilter, zone)
		run(b, s, func(int) uint64 { return 1 })
	})
	b.Run("unmemoized", func(b *testing.B) {
		s := newSet(b, h, SetConfig{MemoEntries: 64})
		activate(b, s, HookRouteFilter, zone)
		// A new route version each time: every call reaches the guest.
		run(b, s, func(i int) uint64 { return uint64(i) + 1 })
	})
}

func BenchmarkExpiryThreshold(b *testing.B) {
	h := newHost(b, HostConfig{})
	for _, file := range []string{"self-preservation.wasm", "jitter-threshold.wasm"} {
		m := load(b, h, file)
		in := sampleThresholdInput()
		b.Run(file, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := m.expiryThreshold(context.Background(), &in, DefaultMinThreshold, DefaultMaxThreshold); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkThresholdAdapter is what the registry pays under its lease lock.
func BenchmarkThresholdAdapter(b *testing.B) {
	h := newHost(b, HostConfig{})
	s := newSet(b, h, SetConfig{})
	activate(b, s, HookExpiryThreshold, load(b, h, "self-preservation.wasm"))
	l := lease(20, 30e9)
	s.Threshold(l)
	waitFor(b, func() bool { return s.Threshold(l) != 0 })
	b.ReportAllocs()
	for b.Loop() {
		s.Threshold(l)
	}
}
