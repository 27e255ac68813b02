package wasm

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// Threshold implements the node registry's Thresholds. The registry calls it with its
// lease lock held on every registration and heartbeat, so it never calls
// the guest: it returns the threshold the active policy last computed for
// this broker and queues a recomputation with the new heartbeat's
// statistics, which a background goroutine runs under the normal call
// deadline. A policy's answer therefore applies from the broker's next
// heartbeat on; until a broker has one (and after any failed call) the
// result is 0, which tells the registry to use its default.
func (s *Set) Threshold(l wire.LeaseSnapshot) time.Duration {
	s.beats.observe(l.LastHeartbeat)
	b := s.slots[HookExpiryThreshold].active.Load()
	if b == nil {
		return 0
	}
	return s.thr.lookup(b, l)
}

// thresholdCache holds each broker's last computed threshold and the queue
// of recomputations, bounded both ways: a full queue drops the request
// (the broker keeps its current threshold until its next heartbeat).
type thresholdCache struct {
	queue chan wire.LeaseSnapshot
	limit int

	mu        sync.Mutex
	cur, prev map[leaseKey]*thresholdEntry
}

type leaseKey struct{ cluster, addr string }

type thresholdEntry struct {
	b       *binding // the activation that computed value; nil if none yet
	value   time.Duration
	epoch   uint64
	beats   uint64
	pending bool
}

func newThresholdCache(queue, limit int) *thresholdCache {
	return &thresholdCache{
		queue: make(chan wire.LeaseSnapshot, queue),
		limit: max(limit/2, 1),
		cur:   make(map[leaseKey]*thresholdEntry),
	}
}

func (c *thresholdCache) lookup(b *binding, l wire.LeaseSnapshot) time.Duration {
	k := leaseKey{l.Cluster, l.Addr}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(k)
	var v time.Duration
	if e.b == b && e.epoch == l.Epoch {
		v = e.value
		if e.beats == l.Heartbeats {
			return v
		}
	}
	if !e.pending {
		select {
		case c.queue <- l:
			e.pending = true
		default:
		}
	}
	return v
}

// entry returns k's entry, creating it; with c.mu held.
func (c *thresholdCache) entry(k leaseKey) *thresholdEntry {
	if e, ok := c.cur[k]; ok {
		return e
	}
	e, ok := c.prev[k]
	if ok {
		delete(c.prev, k)
	} else {
		e = &thresholdEntry{}
	}
	if len(c.cur) >= c.limit {
		c.prev, c.cur = c.cur, make(map[leaseKey]*thresholdEntry, c.limit)
	}
	c.cur[k] = e
	return e
}

func (c *thresholdCache) store(b *binding, l wire.LeaseSnapshot, v time.Duration) {
	c.mu.Lock()
	e := c.entry(leaseKey{l.Cluster, l.Addr})
	e.b, e.value, e.epoch, e.beats, e.pending = b, v, l.Epoch, l.Heartbeats, false
	c.mu.Unlock()
}

func (c *thresholdCache) forget(cluster, addr string) {
	c.mu.Lock()
	delete(c.cur, leaseKey{cluster, addr})
	delete(c.prev, leaseKey{cluster, addr})
	c.mu.Unlock()
}

// refreshThresholds runs the queued threshold computations until Close.
func (s *Set) refreshThresholds() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case l := <-s.thr.queue:
			s.refreshThreshold(l)
		}
	}
}

func (s *Set) refreshThreshold(l wire.LeaseSnapshot) {
	b := s.acquire(HookExpiryThreshold)
	if b == nil {
		s.thr.store(nil, l, 0)
		return
	}
	defer s.done(b)
	in := s.thresholdInput(l)
	v, took, err := b.module.expiryThreshold(s.ctx, &in, s.cfg.MinThreshold, s.cfg.MaxThreshold)
	// Store first: once the call is counted, the next heartbeat must be
	// able to queue a new computation.
	s.thr.store(b, l, v) // 0 after an error: the registry's default
	if err != nil {
		s.failed(s.ctx, b, took, err)
		return
	}
	s.succeeded(b, took)
}

func (s *Set) thresholdInput(l wire.LeaseSnapshot) ThresholdInput {
	def := l.RequestedTimeout
	if def <= 0 {
		def = s.cfg.DefaultThreshold
	}
	in := ThresholdInput{
		Broker:    BrokerInfo{Cluster: l.Cluster, Name: l.BrokerName, ID: l.BrokerID, Addr: l.Addr, Zone: l.Zone},
		Stats:     intervalStats(l, s.cfg.HeartbeatInterval),
		DefaultMs: def.Milliseconds(),
		NowMs:     s.cfg.Now().UnixMilli(),
		Rand:      s.cfg.Rand(),
	}
	if s.cfg.LinkStats != nil {
		if ls, ok := s.cfg.LinkStats(l.Cluster, l.Addr); ok {
			in.Stats.RTTMs = ls.RTT.Milliseconds()
			in.Stats.LossPermille = max(in.Stats.LossPermille, min(ls.LossPermille, 1000))
		}
	}
	return in
}

// intervalStats summarizes a lease's recent heartbeat intervals. An
// interval of about k heartbeat periods means k-1 heartbeats were lost.
func intervalStats(l wire.LeaseSnapshot, period time.Duration) BrokerStats {
	n := int(min(l.Heartbeats, wire.IntervalWindow))
	st := BrokerStats{Heartbeats: l.Heartbeats, IntervalsMs: make([]int64, n)}
	if n == 0 {
		return st
	}
	var sum, missed float64
	for i := range n {
		iv := l.Intervals[i]
		st.IntervalsMs[i] = iv.Milliseconds()
		sum += float64(iv)
		missed += max(math.Round(float64(iv)/float64(period))-1, 0)
	}
	mean := sum / float64(n)
	var sq float64
	for i := range n {
		d := float64(l.Intervals[i]) - mean
		sq += d * d
	}
	st.MeanIntervalMs = int64(mean / float64(time.Millisecond))
	st.JitterMs = int64(math.Sqrt(sq/float64(n)) / float64(time.Millisecond))
	st.Missed = uint32(missed)
	st.LossPermille = uint32(missed * 1000 / (missed + float64(n)))
	return st
}

// ConfirmExpiry implements the node registry's ExpiryConfirmer: the active confirm
// policy decides which due leases go now. Without a policy all of them go
// (the registry's built-in behaviour); when the call fails, the hook's
// FailMode (SetConfig.ConfirmFailure) decides: closed (the default) holds
// them all back until the next sweep, open removes them all.
func (s *Set) ConfirmExpiry(due []wire.LeaseSnapshot, stats wire.ExpiryStats) []wire.LeaseSnapshot {
	b := s.acquire(HookExpiryConfirm)
	if b == nil {
		s.forgetThresholds(due)
		return due
	}
	defer s.done(b)
	now := s.cfg.Now()
	in := ConfirmInput{
		Due: make([]DueLease, len(due)),
		Stats: ConfirmStats{
			Leases: uint32(stats.Leases), Due: uint32(stats.Due),
			HeartbeatSuccessPermille: s.beats.rate(now, stats.Leases),
		},
		NowMs: now.UnixMilli(),
		Rand:  s.cfg.Rand(),
	}
	for i, d := range due {
		in.Due[i] = DueLease{
			Cluster: d.Cluster, Addr: d.Addr, Name: d.BrokerName, ID: d.BrokerID, Epoch: d.Epoch,
			LastHeartbeatMs: d.LastHeartbeat.UnixMilli(), DeadlineMs: d.Deadline.UnixMilli(),
		}
	}
	idx, took, err := b.module.confirmExpiry(s.ctx, &in)
	if err != nil {
		s.failed(context.Background(), b, took, err)
		// Held back only for the module's own failures, which count
		// towards its deactivation: a hold-back always ends. A call the
		// host could not run (no instance within the node-wide budget)
		// counts for nothing, so it gets the built-in rule.
		if s.cfg.ConfirmFailure == FailClosed && !errors.Is(err, ErrBusy) {
			return nil
		}
		s.forgetThresholds(due)
		return due
	}
	s.succeeded(b, took)
	out := make([]wire.LeaseSnapshot, len(idx))
	for i, j := range idx {
		out[i] = due[j]
	}
	s.forgetThresholds(out)
	return out
}

// forgetThresholds drops the cached thresholds of leases about to go: a
// broker that comes back registers with a new epoch anyway.
func (s *Set) forgetThresholds(gone []wire.LeaseSnapshot) {
	for _, d := range gone {
		s.thr.forget(d.Cluster, d.Addr)
	}
}

// beatRate counts heartbeats in fixed windows to tell confirm policies how
// many of the expected heartbeats arrived in the last full window, as
// Eureka's renewal threshold does with renewals per minute.
type beatRate struct {
	period time.Duration
	window time.Duration

	mu       sync.Mutex
	start    time.Time
	cur      uint64
	prev     uint64
	havePrev bool
}

func newBeatRate(period time.Duration) *beatRate {
	return &beatRate{period: period, window: max(time.Minute, 2*period)}
}

func (r *beatRate) observe(t time.Time) {
	r.mu.Lock()
	r.rotate(t)
	r.cur++
	r.mu.Unlock()
}

// rotate moves the window forward to t; with r.mu held.
func (r *beatRate) rotate(t time.Time) {
	if r.start.IsZero() {
		r.start = t
		return
	}
	passed := t.Sub(r.start)
	if passed < r.window {
		return
	}
	if passed < 2*r.window {
		r.prev = r.cur
	} else {
		r.prev = 0 // a whole window passed without a heartbeat
	}
	r.havePrev = true
	r.cur = 0
	r.start = r.start.Add(passed / r.window * r.window)
}

// rate returns the heartbeat success rate in 1/1000 for a node with
// leases live leases: 1000 until a full window has been seen.
func (r *beatRate) rate(now time.Time, leases int) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotate(now)
	expected := float64(leases) * float64(r.window) / float64(r.period)
	if !r.havePrev || expected < 1 {
		return 1000
	}
	return uint32(min(float64(r.prev)*1000/expected, 1000))
}
