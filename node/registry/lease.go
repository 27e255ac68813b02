package registry

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// IntervalWindow is how many recent heartbeat intervals a lease remembers
// for threshold policies (wire.IntervalWindow).
const IntervalWindow = wire.IntervalWindow

type leaseKey struct{ cluster, addr string }

// lease is one live broker (RocketMQ's BrokerLiveInfo), keyed by cluster and
// address, independent of any connection.
type lease struct {
	key        leaseKey
	brokerName string
	brokerID   int64
	haAddr     string
	zone       string
	version    wire.DataVersion
	epoch      uint64
	registered int64 // on the registry's timeline (reading.ns)
	last       int64 // last heartbeat, on the registry's timeline
	requested  time.Duration
	threshold  time.Duration
	deadline   int64 // last + threshold, on the registry's timeline
	heapIdx    int
	beats      uint64
	intervals  [IntervalWindow]time.Duration // ring, indexed by beats
}

// LeaseInfo is a snapshot of one broker's lease. It is wire.LeaseSnapshot, so
// the policy host (wasm) can implement Thresholds and ExpiryConfirmer
// without importing this package.
type LeaseInfo = wire.LeaseSnapshot

// info is the lease as of the clock reading rd, its times on the wall clock.
func (l *lease) info(rd reading) LeaseInfo {
	li := LeaseInfo{
		Cluster:          l.key.cluster,
		Addr:             l.key.addr,
		BrokerName:       l.brokerName,
		BrokerID:         l.brokerID,
		HAAddr:           l.haAddr,
		Zone:             l.zone,
		Epoch:            l.epoch,
		DataVersion:      l.version,
		Registered:       rd.wallOf(l.registered),
		LastHeartbeat:    rd.wallOf(l.last),
		Deadline:         rd.wallOf(l.deadline),
		RequestedTimeout: l.requested,
		Threshold:        l.threshold,
		Heartbeats:       l.beats,
	}
	n := min(l.beats, IntervalWindow)
	for i := range n {
		li.Intervals[i] = l.intervals[(l.beats-1-i)%IntervalWindow]
	}
	return li
}

// renewLease starts a lease for a registration, or renews an existing one
// with a new epoch, as of the clock reading rd. With mu and leaseMu held.
func (r *Registry) renewLease(key leaseKey, l *lease, reg *Registration, rd reading) *lease {
	now := rd.ns
	if l == nil {
		l = &lease{key: key, heapIdx: -1, registered: now}
		r.leases[key] = l
	}
	r.nextEpoch++
	l.epoch = r.nextEpoch
	l.brokerName, l.brokerID = reg.BrokerName, reg.BrokerID
	l.haAddr, l.zone = reg.HAAddr, reg.Zone
	l.version = reg.DataVersion
	l.requested = reg.HeartbeatTimeout
	l.last = now
	l.setDeadline(r.threshold(l, rd))
	r.deadlines.upsert(l)
	return l
}

// touch records a heartbeat at the clock reading rd and moves the lease's
// deadline.
func (r *Registry) touch(l *lease, rd reading) {
	l.intervals[l.beats%IntervalWindow] = time.Duration(rd.ns - l.last)
	l.beats++
	l.last = rd.ns
	l.setDeadline(r.threshold(l, rd))
	r.deadlines.upsert(l)
}

func (l *lease) setDeadline(threshold time.Duration) {
	l.threshold = threshold
	l.deadline = l.last + int64(threshold)
}

func (r *Registry) threshold(l *lease, rd reading) time.Duration {
	def := r.defThreshold
	if l.requested > 0 {
		def = min(max(l.requested, r.minThreshold), r.maxThreshold)
	}
	if r.thresholds == nil {
		return def
	}
	if t := r.thresholds.Threshold(l.info(rd)); t > 0 {
		return t
	}
	return def
}

func (r *Registry) dropLease(key leaseKey) {
	l := r.leases[key]
	if l == nil {
		return
	}
	delete(r.leases, key)
	r.deadlines.remove(l)
}

// Leases returns a snapshot of every lease, sorted by cluster and address.
func (r *Registry) Leases() []LeaseInfo {
	rd := r.read()
	r.leaseMu.Lock()
	out := make([]LeaseInfo, 0, len(r.leases))
	for _, l := range r.leases {
		out = append(out, l.info(rd))
	}
	r.leaseMu.Unlock()
	slices.SortFunc(out, func(a, b LeaseInfo) int {
		return cmp.Or(strings.Compare(a.Cluster, b.Cluster), strings.Compare(a.Addr, b.Addr))
	})
	return out
}

// NextDeadline returns the earliest lease deadline, if any lease exists.
func (r *Registry) NextDeadline() (time.Time, bool) {
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	if len(r.deadlines) == 0 {
		return time.Time{}, false
	}
	return r.read().wallOf(r.deadlines[0].deadline), true
}

// ExpireDue removes the leases whose deadline has passed (deadline <= now),
// as far as the ExpiryConfirmer allows, and returns what it removed. It
// touches only what is due. A broker that registered again after the scan
// saw it due keeps its new registration: removal names the epoch it saw.
func (r *Registry) ExpireDue() []LeaseInfo {
	rd := r.read()
	now := rd.ns
	r.leaseMu.Lock()
	due := r.deadlines.due(rd)
	stats := ExpiryStats{Leases: len(r.leases), Due: len(due)}
	r.leaseMu.Unlock()
	if len(due) == 0 {
		return nil
	}
	if r.confirmer != nil {
		due = confirmedSubset(due, r.confirmer.ConfirmExpiry(slices.Clone(due), stats))
	}
	return r.expire(due, now)
}

// confirmedSubset keeps the leases of due that the confirmer named, so a
// confirmer can never remove what was not due.
func confirmedSubset(due, confirmed []LeaseInfo) []LeaseInfo {
	out := due[:0]
	for _, d := range due {
		for _, c := range confirmed {
			if c.Cluster == d.Cluster && c.Addr == d.Addr && c.Epoch == d.Epoch {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

func (r *Registry) expire(due []LeaseInfo, now int64) []LeaseInfo {
	r.mu.Lock()
	r.leaseMu.Lock()
	cs := &changeSet{}
	removed := due[:0]
	for _, d := range due {
		l := r.leases[leaseKey{d.Cluster, d.Addr}]
		if l == nil || l.epoch != d.Epoch || l.deadline > now {
			continue // re-registered or renewed since the scan
		}
		cs.merge(r.removeLease(l))
		removed = append(removed, d)
	}
	r.leaseMu.Unlock()
	r.mu.Unlock()
	r.notify(cs)
	return removed
}

// deadlineHeap is a binary min-heap of leases by deadline. Entries carry the
// deadline by value so sifting does not chase lease pointers.
type deadlineHeap []heapEntry

type heapEntry struct {
	deadline int64
	l        *lease
}

func (h *deadlineHeap) upsert(l *lease) {
	if l.heapIdx < 0 {
		l.heapIdx = len(*h)
		*h = append(*h, heapEntry{l.deadline, l})
		h.up(l.heapIdx)
		return
	}
	i := l.heapIdx
	old := (*h)[i].deadline
	(*h)[i].deadline = l.deadline
	if l.deadline < old {
		h.up(i)
	} else {
		h.down(i)
	}
}

func (h *deadlineHeap) remove(l *lease) {
	i := l.heapIdx
	if i < 0 {
		return
	}
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = heapEntry{}
	*h = (*h)[:last]
	l.heapIdx = -1
	if i != last {
		h.down(i)
		h.up(i)
	}
}

// due returns the leases with deadline <= rd, visiting only those entries
// and their direct children.
func (h deadlineHeap) due(rd reading) []LeaseInfo {
	var out []LeaseInfo
	var walk func(i int)
	walk = func(i int) {
		if i >= len(h) || h[i].deadline > rd.ns {
			return
		}
		out = append(out, h[i].l.info(rd))
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	return out
}

func (h deadlineHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].l.heapIdx = i
	h[j].l.heapIdx = j
}

func (h deadlineHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].deadline <= h[i].deadline {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h deadlineHeap) down(i int) {
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && h[c+1].deadline < h[c].deadline {
			c++
		}
		if h[i].deadline <= h[c].deadline {
			return
		}
		h.swap(i, c)
		i = c
	}
}

// Lease returns the lease of the broker at addr in a cluster.
func (r *Registry) Lease(clusterName, addr string) (LeaseInfo, bool) {
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	l := r.leases[leaseKey{clusterName, addr}]
	if l == nil {
		return LeaseInfo{}, false
	}
	return l.info(r.read()), true
}

// LeaseCount returns how many brokers hold a lease.
func (r *Registry) LeaseCount() int {
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	return len(r.leases)
}
