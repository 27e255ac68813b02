package wasm

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// histogram is a lock-free log-linear histogram of call times: four
// buckets per doubling from 512 ns, so a quantile is off by at most 25%,
// and recording is one atomic add.
type histogram struct {
	counts [histBuckets]atomic.Uint64
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

func (h *histogram) record(d time.Duration) { h.counts[bucketOf(d)].Add(1) }

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

// hookStats counts the calls of one activation of a module for a hook.
type hookStats struct {
	calls       atomic.Uint64
	errors      atomic.Uint64
	fallbacks   atomic.Uint64
	consecutive atomic.Int64
	times       histogram
}
