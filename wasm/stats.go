package wasm

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// histogram is a lock-free log-linear histogram of call times: four
// buckets per doubling from 512 ns, so a quantile is off by at most 25%,
// and recording is one atomic add.
type histogram struct {
	counts [histBuckets]atomic.Uint64
	sum    atomic.Uint64 // nanoseconds
}

const (
	histBuckets  = 96 // 24 doublings from 512 ns: up to about 8.6 s
	histMinShift = 9  // 2^9 ns = 512 ns
)

func bucketOf(d time.Duration) int {
	ns := uint64(max(d, 1))
	e := bits.Len64(ns) - 1
	if e < histMinShift {
		return 0
	}
	sub := int(ns>>(e-2)) & 3
	return min((e-histMinShift)*4+sub, histBuckets-1)
}

// upperBound returns the largest duration bucket i holds.
func upperBound(i int) time.Duration {
	e := i/4 + histMinShift
	sub := uint64(i % 4)
	return time.Duration((5+sub)<<(e-2) - 1)
}

func (h *histogram) record(d time.Duration) {
	h.counts[bucketOf(d)].Add(1)
	h.sum.Add(uint64(max(d, 0)))
}

// Buckets returns the histogram as cumulative counts at upper bounds, one
// per doubling of call time (from 2 µs), with the total count and sum: a
// Prometheus histogram.
func (h *histogram) Buckets() (upper []time.Duration, cumulative []uint64, count uint64, sum time.Duration) {
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if i%4 == 3 {
			upper = append(upper, upperBound(i))
			cumulative = append(cumulative, seen)
		}
	}
	return upper, cumulative, seen, time.Duration(h.sum.Load())
}

// quantile returns an upper bound of the q-quantile (0 < q <= 1), or 0
// with no samples.
func (h *histogram) quantile(q float64) time.Duration {
	var counts [histBuckets]uint64
	var total uint64
	for i := range h.counts {
		counts[i] = h.counts[i].Load()
		total += counts[i]
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total) + 0.5)
	rank = max(rank, 1)
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			return upperBound(i)
		}
	}
	return upperBound(histBuckets - 1)
}

// hookStats counts the calls of one module for one hook over every
// activation of it, so the counters never go backwards while the Set
// remembers the module.
type hookStats struct {
	calls     atomic.Uint64
	errors    atomic.Uint64
	fallbacks atomic.Uint64
	// successes counts calls the guest answered well on real traffic (the
	// dry run does not count): what makes a module "known good".
	successes atomic.Uint64
	times     histogram
}

// health is the failure record of one activation, for deactivation: the
// current streak of failures and the outcomes of the last calls.
type health struct {
	mu       sync.Mutex
	streak   int
	ring     []bool // true = failed
	next     int
	filled   int
	failures int // in ring
}

func newHealth(window int) *health { return &health{ring: make([]bool, max(window, 1))} }

// record adds an outcome and returns the streak and the failures among
// the last len(ring) calls (and how many calls that window holds).
func (h *health) record(failed bool) (streak, failures, calls int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if failed {
		h.streak++
	} else {
		h.streak = 0
	}
	if h.filled == len(h.ring) && h.ring[h.next] {
		h.failures--
	}
	h.ring[h.next] = failed
	if failed {
		h.failures++
	}
	h.next = (h.next + 1) % len(h.ring)
	h.filled = min(h.filled+1, len(h.ring))
	return h.streak, h.failures, h.filled
}
