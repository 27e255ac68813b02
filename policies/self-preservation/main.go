// Command self-preservation is an expiry policy for brokers on lossy
// links, in two hooks.
//
// Expiry threshold: how long a broker may stay silent stretches with what
// the node observed of its heartbeats, and never shrinks below the node's
// default. The expected gap between two heartbeats that arrive is taken
// as mean + 4·jitter (as TCP sizes its retransmission timeout from SRTT +
// 4·RTTVAR); the broker is allowed to lose enough heartbeats in a row that
// doing so by chance has a probability under 1e-6 at its observed loss
// rate (at least 4, at most 12 gaps); twice the transport RTT is added.
// With fewer than 3 heartbeats seen, the default applies.
//
// Expiry confirm: Eureka's self-preservation. If the node received fewer
// than 85% of the heartbeats it expected in the last window (Eureka's
// renewalPercentThreshold 0.85 on renewals per minute), the node is more
// likely cut off than the brokers dead, and nothing is removed. Otherwise
// at most 15% of the leases go in one scan (Eureka's eviction limit,
// registrySize - floor(registrySize·0.85)), chosen at random from the
// due ones as Eureka does, with the host's random input; the rest stay due
// and are offered again at the next scan.
package main

import (
	"math"

	"github.com/edgereg/edgereg/policies/sdk"
)

const (
	// renewalPermille is Eureka's renewalPercentThreshold, in 1/1000.
	renewalPermille = 850
	// falseExpiry is the accepted chance that a live broker loses enough
	// heartbeats in a row to be expired.
	falseExpiry  = 1e-6
	minTolerated = 4
	maxTolerated = 12
	minBeats     = 3
)

func init() {
	sdk.ExpiryThreshold(threshold)
	sdk.ExpiryConfirm(confirm)
}

func main() {}

func threshold(in sdk.ThresholdInput) (int64, error) {
	st := in.Stats
	if st.Heartbeats < minBeats || st.MeanIntervalMs <= 0 {
		return in.DefaultMs, nil
	}
	gap := float64(st.MeanIntervalMs + 4*st.JitterMs)
	tolerated := float64(minTolerated)
	if loss := float64(st.LossPermille) / 1000; loss > 0 && loss < 1 {
		tolerated = math.Ceil(math.Log(falseExpiry) / math.Log(loss))
	} else if loss >= 1 {
		tolerated = maxTolerated
	}
	tolerated = min(max(tolerated, minTolerated), maxTolerated)
	t := int64(tolerated*gap) + 2*st.RTTMs
	return max(t, in.DefaultMs), nil
}

func confirm(in sdk.ConfirmInput) ([]int, error) {
	if in.Stats.HeartbeatSuccessPermille < renewalPermille {
		return []int{}, nil // self-preservation: keep everyone
	}
	leases := int(in.Stats.Leases)
	limit := leases - leases*renewalPermille/1000
	n := min(len(in.Due), max(limit, 0))
	idx := make([]int, len(in.Due))
	for i := range idx {
		idx[i] = i
	}
	// A partial Fisher-Yates shuffle picks n at random, like Eureka's
	// Knuth shuffle of the expired leases.
	rnd := splitmix{in.Rand}
	for i := range n {
		j := i + int(rnd.next()%uint64(len(idx)-i))
		idx[i], idx[j] = idx[j], idx[i]
	}
	return idx[:n], nil
}

// splitmix is SplitMix64: a tiny generator seeded from the host's random
// input, so the guest needs no entropy of its own.
type splitmix struct{ s uint64 }

func (r *splitmix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
