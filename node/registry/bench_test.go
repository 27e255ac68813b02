package registry

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
)

func manyTopics(prefix string, n int) []wire.TopicConfig {
	out := make([]wire.TopicConfig, n)
	for i := range out {
		out[i] = wire.TopicConfig{Name: fmt.Sprintf("%s%06d", prefix, i), ReadQueues: 8, WriteQueues: 8, Perm: 6}
	}
	return out
}

// BenchmarkRouteCached reads cached routes among 100k topics: "random"
// picks any topic (each read misses the CPU caches: memory-bound), "hot"
// cycles over 1000 of them (the working set stays cached).
func BenchmarkRouteCached(b *testing.B) {
	r, _ := newTestRegistry(b)
	// Each topic lives on two of 8 groups, as in the peers benchmark.
	perGroup := make([][]wire.TopicConfig, 8)
	for i, tc := range manyTopics("topic_", 100_000) {
		perGroup[i%8] = append(perGroup[i%8], tc)
		perGroup[(i+1)%8] = append(perGroup[(i+1)%8], tc)
	}
	for g := range 8 {
		rg := reg("c1", fmt.Sprintf("broker-%d", g), 0, fmt.Sprintf("10.0.0.%d:10911", g))
		rg.Topics = perGroup[g]
		mustRegister(b, r, rg)
	}
	names := r.Topics()
	for _, n := range names {
		_, _ = r.Route(n) // warm the caches
	}
	for _, bc := range []struct {
		name   string
		topics []string
	}{{"random-of-100k", names}, {"hot-1k-of-100k", names[:1000]}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := r.Route(bc.topics[i%len(bc.topics)]); err != nil {
					b.Fatal(err)
				}
				i += 7919
			}
		})
	}
}

// BenchmarkHeartbeat renews the leases of 10k brokers in turn.
func BenchmarkHeartbeat(b *testing.B) {
	r, clk := newTestRegistry(b)
	const n = 10_000
	epochs := make([]uint64, n)
	addrs := make([]string, n)
	for i := range n {
		addrs[i] = fmt.Sprintf("10.%d.%d.%d:10911", i>>16, (i>>8)&255, i&255)
		epochs[i] = mustRegister(b, r, reg("c1", fmt.Sprintf("b%d", i), 0, addrs[i], "t")).Epoch
	}
	v := wire.DataVersion{Counter: 1}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		k := i % n
		if _, err := r.Heartbeat("c1", addrs[k], epochs[k], v); err != nil {
			b.Fatal(err)
		}
		i++
		if k == n-1 {
			clk.Advance(time.Second)
		}
	}
}

// BenchmarkRegisterFull re-sends a full registration whose data version
// changed every time, so every topic is looked at.
func BenchmarkRegisterFull(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("topics=%d", n), func(b *testing.B) {
			r, _ := newTestRegistry(b)
			rg := reg("c1", "b1", 0, "10.0.0.1:10911")
			rg.Topics = manyTopics("topic_", n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				rg.DataVersion.Counter = uint64(i + 2)
				rg.Topics[i%n].WriteQueues = uint32(i%8 + 1) // one topic really changes
				if _, err := r.Register(rg); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/topic")
		})
	}
}

// BenchmarkRegisterNewGroup registers a new group with 100 topics of its
// own each time, as a registration storm does: every topic and the group's
// tables are new.
func BenchmarkRegisterNewGroup(b *testing.B) {
	r, _ := newTestRegistry(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		rg := reg("c1", fmt.Sprintf("b%d", i), 0, fmt.Sprintf("10.%d.%d.%d:10911", i>>16&255, i>>8&255, i&255))
		rg.Topics = manyTopics(fmt.Sprintf("t%d_", i), 100)
		if _, err := r.Register(rg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRegisterResend re-sends a full registration whose data version
// changed every time and whose topics did not, as brokers mostly do (and
// as `edgereg bench register` does): sameTopics finds nothing to apply.
func BenchmarkRegisterResend(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("topics=%d", n), func(b *testing.B) {
			r, _ := newTestRegistry(b)
			rg := reg("c1", "b1", 0, "10.0.0.1:10911")
			rg.Topics = manyTopics("topic_", n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				rg.DataVersion.Counter = uint64(i + 2)
				if _, err := r.Register(rg); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/topic")
		})
	}
}

// BenchmarkExpiryScan expires 10 brokers among many: the cost must be that
// of the 10, whatever the total.
func BenchmarkExpiryScan(b *testing.B) {
	for _, total := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("brokers=%d/due=10", total), func(b *testing.B) {
			r, clk := newTestRegistry(b)
			for i := range total - 10 {
				rg := reg("c1", fmt.Sprintf("b%d", i), 0, fmt.Sprintf("10.%d.%d.%d:1", i>>16, (i>>8)&255, i&255), "t")
				rg.HeartbeatTimeout = 1000 * time.Hour
				mustRegister(b, r, rg)
			}
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				for i := range 10 {
					rg := reg("c2", fmt.Sprintf("short%d", i), 0, fmt.Sprintf("10.200.0.%d:1", i), "t")
					rg.HeartbeatTimeout = DefaultMinThreshold // the shortest a broker may ask for
					mustRegister(b, r, rg)
				}
				clk.Advance(DefaultMinThreshold + time.Millisecond)
				b.StartTimer()
				if got := r.ExpireDue(); len(got) != 10 {
					b.Fatalf("expired %d, want 10", len(got))
				}
			}
		})
	}
}

// BenchmarkMemoryPerEntry builds 1M (topic, broker group) entries, 125k
// topics on 8 groups each, and reports the heap they take per entry, with
// and without every route's encoded cache.
func BenchmarkMemoryPerEntry(b *testing.B) {
	const groups, topicsPerGroup = 8, 125_000
	ts := manyTopics("topic_", topicsPerGroup)
	for b.Loop() {
		before := heapInUse()
		r, _ := newTestRegistry(b)
		for g := range groups {
			rg := reg("cluster-1", fmt.Sprintf("broker-%d", g), 0, fmt.Sprintf("10.0.0.%d:10911", g))
			rg.Topics = ts
			mustRegister(b, r, rg)
		}
		tables := heapInUse()
		for _, n := range r.Topics() {
			_, _ = r.Route(n)
		}
		cached := heapInUse()
		entries := float64(groups * topicsPerGroup)
		b.ReportMetric(float64(tables-before)/entries, "B/entry")
		b.ReportMetric(float64(cached-before)/entries, "B/entry-cached")
		runtime.KeepAlive(r)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
