package wasm

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// checkSubset verifies that out, a filtered route, only takes away from in:
// every queue and broker group of out is in in, with no more queues, no
// more permission bits and the same system flags; every broker address of
// out is an address of the same broker id in in; and every queue in out
// still has its group's broker data, so a client can resolve it.
func checkSubset(in, out *wire.Route) error {
	queues := make(map[string]*wire.QueueData, len(in.Queues))
	for i := range in.Queues {
		queues[in.Queues[i].BrokerName] = &in.Queues[i]
	}
	groups := make(map[string]*wire.BrokerData, len(in.Brokers))
	for i := range in.Brokers {
		groups[in.Brokers[i].Name] = &in.Brokers[i]
	}
	kept := make(map[string]bool, len(out.Brokers))
	for i := range out.Brokers {
		b := &out.Brokers[i]
		if err := checkGroup(b, groups[b.Name]); err != nil {
			return err
		}
		if kept[b.Name] {
			return fmt.Errorf("%w: broker group %q appears twice", ErrBadOutput, b.Name)
		}
		kept[b.Name] = true
	}
	seen := make(map[string]bool, len(out.Queues))
	for i := range out.Queues {
		q := &out.Queues[i]
		if err := checkQueue(q, queues[q.BrokerName]); err != nil {
			return err
		}
		if seen[q.BrokerName] {
			return fmt.Errorf("%w: queues of %q appear twice", ErrBadOutput, q.BrokerName)
		}
		seen[q.BrokerName] = true
		if !kept[q.BrokerName] {
			return fmt.Errorf("%w: queues of %q kept without its broker data", ErrBadOutput, q.BrokerName)
		}
	}
	return nil
}

func checkGroup(out, in *wire.BrokerData) error {
	if in == nil {
		return fmt.Errorf("%w: broker group %q is not in the input route", ErrBadOutput, out.Name)
	}
	if out.Cluster != in.Cluster || out.Zone != in.Zone {
		return fmt.Errorf("%w: broker group %q changed its cluster or zone", ErrBadOutput, out.Name)
	}
	for id, addr := range out.Addrs {
		if have, ok := in.Addrs[id]; !ok || have != addr {
			return fmt.Errorf("%w: broker group %q: address %d=%q is not in the input route", ErrBadOutput, out.Name, id, addr)
		}
	}
	return nil
}

func checkQueue(out, in *wire.QueueData) error {
	if in == nil {
		return fmt.Errorf("%w: queues of %q are not in the input route", ErrBadOutput, out.BrokerName)
	}
	switch {
	case out.ReadQueues > in.ReadQueues, out.WriteQueues > in.WriteQueues:
		return fmt.Errorf("%w: queues of %q: more queues than the input", ErrBadOutput, out.BrokerName)
	case out.Perm&^in.Perm != 0:
		return fmt.Errorf("%w: queues of %q: permission %d adds bits to %d", ErrBadOutput, out.BrokerName, out.Perm, in.Perm)
	case out.SysFlag != in.SysFlag:
		return fmt.Errorf("%w: queues of %q: system flags changed", ErrBadOutput, out.BrokerName)
	}
	return nil
}

// canonical sorts a route's lists by broker name, as the registry builds
// them, so equal routes encode to equal bytes whatever order a guest used.
func canonical(r *wire.Route) {
	slices.SortFunc(r.Queues, func(a, b wire.QueueData) int { return cmp.Compare(a.BrokerName, b.BrokerName) })
	slices.SortFunc(r.Brokers, func(a, b wire.BrokerData) int { return cmp.Compare(a.Name, b.Name) })
	if r.Queues == nil {
		r.Queues = []wire.QueueData{}
	}
	if r.Brokers == nil {
		r.Brokers = []wire.BrokerData{}
	}
}

// checkThreshold turns a guest's threshold into one the node may apply.
// A value outside [lo, hi] is an error, not clamped: it means the guest
// computed nonsense (1 ms, 2^63-1), and the built-in default is the safer
// answer than the nearest bound.
func checkThreshold(ms int64, lo, hi time.Duration) (time.Duration, error) {
	if ms < lo.Milliseconds() || ms > hi.Milliseconds() {
		return 0, fmt.Errorf("%w: threshold %d ms is outside [%d, %d] ms", ErrBadOutput, ms, lo.Milliseconds(), hi.Milliseconds())
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// checkIndexes verifies a confirmer's answer: indexes into due, each once.
func checkIndexes(idx []uint32, due int) error {
	if len(idx) > due { // each at most once: checked before the set is sized by it
		return fmt.Errorf("%w: %d indexes for %d due leases", ErrBadOutput, len(idx), due)
	}
	seen := make(map[uint32]bool, len(idx))
	for _, i := range idx {
		if int(i) >= due {
			return fmt.Errorf("%w: index %d out of range [0,%d)", ErrBadOutput, i, due)
		}
		if seen[i] {
			return fmt.Errorf("%w: index %d named twice", ErrBadOutput, i)
		}
		seen[i] = true
	}
	return nil
}
