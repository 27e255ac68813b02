package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
)

// watchSlots is how many distinct routes a watched topic cycles through:
// change k of a topic sets its queues to 2 + k mod watchSlots, so the
// queue count in a pushed route names the change it shows.
const watchSlots = 1000

// watchChange is one route change and when it was sent.
type watchChange struct {
	topic, slot int
	sent        time.Time
}

// watchClock records, per (topic, slot), when the change was sent and when
// its first and last deliveries arrived (Unix nanoseconds), and how many
// arrived.
type watchClock struct {
	index             map[string]int // topic name -> number; read-only
	sent, first, last []atomic.Int64
	got               []atomic.Int64
}

func newWatchClock(topics []string) *watchClock {
	n := len(topics) * watchSlots
	c := &watchClock{index: make(map[string]int, len(topics)),
		sent: make([]atomic.Int64, n), first: make([]atomic.Int64, n), last: make([]atomic.Int64, n), got: make([]atomic.Int64, n)}
	for i, t := range topics {
		c.index[t] = i
	}
	return c
}

// delivered notes a delivery of (topic, slot) at now and returns its
// latency, or false when the change was not sent by this run.
func (c *watchClock) delivered(topic, slot int, now time.Time) (time.Duration, bool) {
	i := topic*watchSlots + slot
	sent := c.sent[i].Load()
	if sent == 0 {
		return 0, false
	}
	ns := now.UnixNano()
	for {
		old := c.last[i].Load()
		if ns <= old || c.last[i].CompareAndSwap(old, ns) {
			break
		}
	}
	for {
		old := c.first[i].Load()
		if (old != 0 && old <= ns) || c.first[i].CompareAndSwap(old, ns) {
			break
		}
	}
	c.got[i].Add(1)
	return time.Duration(ns - sent), true
}

func (c *watchClock) start(topic, slot int, t time.Time) {
	i := topic*watchSlots + slot
	c.first[i].Store(0)
	c.last[i].Store(0)
	c.got[i].Store(0)
	c.sent[i].Store(t.UnixNano())
}

// runWatchBench measures watch fan-out: --watchers streams each watch the same
// --watch-topics topics of one broker, whose routes change --change-rate
// times a second (one topic per change, round robin, by update-topics).
// It reports every delivery's latency (p50, p99), deliveries per second,
// the node's CPU per delivery, and in the note the latency to the last
// watcher of each change and how long the change took to be acknowledged.
//
// A latency runs from just before the update-topics request is sent (so it
// includes the request's way to the node) to the moment the stream's read
// goroutine has read the event frame, before its body is decoded: each
// watch stream is read by its own goroutine, which hands the frame to the
// watcher's check directly (client.OpenWatchPipe), with no channel or
// second goroutine in between to add its wake-up to the latency. Every
// delivery is checked (its topic and the change its route shows, hence
// its version), but each distinct event body is decoded once and what it
// said remembered (the node sends every watcher of a topic version the
// same bytes): client and node share the machine, and decoding a thousand
// copies of one event would measure the load generator, not the node's
// fan-out.
func runWatchBench(ctx context.Context, progress io.Writer, tgt *benchTarget, bf *benchFlags) (benchResult, error) {
	pf := bf.perf
	if pf.watchers < 1 || pf.watchTopics < 1 || pf.changeRate <= 0 || pf.watchersPer < 1 {
		return benchResult{}, errors.New("--watchers, --watch-topics, --watchers-per-conn and --change-rate must be positive")
	}
	ctl, err := client.Dial(ctx, tgt.addr, client.Config{TLS: tgt.tls})
	if err != nil {
		return benchResult{}, err
	}
	defer ctl.Close()
	topics := make([]string, pf.watchTopics)
	reg := &wire.Register{Cluster: "BenchCluster", BrokerName: "watch-broker", Addr: "10.2.0.1:10911",
		DataVersion: wire.DataVersion{Counter: 1}, HeartbeatTimeoutMs: uint64(time.Hour.Milliseconds())}
	for i := range topics {
		topics[i] = fmt.Sprintf("bench_watch_%04d", i)
		reg.Topics = append(reg.Topics, wire.TopicConfig{Name: topics[i], ReadQueues: 1, WriteQueues: 1, Perm: 6})
	}
	ack, err := ctl.Register(ctx, reg)
	if err != nil {
		return benchResult{}, fmt.Errorf("register: %w", err)
	}

	conns, err := dialN(ctx, tgt, (pf.watchers+pf.watchersPer-1)/pf.watchersPer)
	if err != nil {
		return benchResult{}, err
	}
	defer closeAll(conns)
	// A thousand reader goroutines whose stacks grow for every event after
	// each collection shrank them took a sixth of the load generator's CPU
	// at the default GOGC; this process's heap is small, so collect less.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	clock := newWatchClock(topics)
	events := &eventCache{clock: clock}
	var measuring atomic.Bool
	var deliveries, errs atomic.Int64
	pipes, rcvs, err := openWatches(ctx, conns, pf, topics, func() *watchReceiver {
		return &watchReceiver{clock: clock, events: events, measuring: &measuring, deliveries: &deliveries, errs: &errs,
			lat: make([]time.Duration, 0, latHint)}
	})
	if err != nil {
		return benchResult{}, err
	}
	defer func() {
		for _, p := range pipes {
			p.Close()
		}
	}()

	var changes []watchChange
	var acks []time.Duration
	var changeMu sync.Mutex
	changer := func(runCtx context.Context) {
		tick := time.NewTicker(time.Duration(float64(time.Second) / pf.changeRate))
		defer tick.Stop()
		for k := 0; ; k++ {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			topic, slot := k%len(topics), (k/len(topics))%watchSlots
			t0 := time.Now()
			clock.start(topic, slot, t0)
			u := &wire.UpdateTopics{Cluster: reg.Cluster, Addr: reg.Addr, Epoch: ack.Lease.Epoch,
				DataVersion: wire.DataVersion{Counter: uint64(k + 2)},
				Upsert:      []wire.TopicConfig{{Name: topics[topic], ReadQueues: uint32(slot + 2), WriteQueues: uint32(slot + 2), Perm: 6}}}
			if _, err := ctl.UpdateTopics(runCtx, u); err != nil {
				if runCtx.Err() == nil {
					errs.Add(1)
				}
				continue
			}
			if measuring.Load() {
				changeMu.Lock()
				changes = append(changes, watchChange{topic, slot, t0})
				acks = append(acks, time.Since(t0))
				changeMu.Unlock()
			}
		}
	}
	// Collect now, before the warm-up, so that the measured time is less
	// likely to hold a collection: one shrinks the stacks of the thousand
	// reader goroutines, which then grow again, copied, on the next
	// change's events, a millisecond or more of CPU in that one change's
	// tail. The warm-up's events grow them back first.
	runtime.GC()
	runCtx, stop := context.WithCancel(ctx)
	changerDone := make(chan struct{})
	go func() { defer close(changerDone); changer(runCtx) }()
	stopProgress := startProgress(progress, bf.progress, "watch", &deliveries, bf.warmup+bf.duration)
	sleepCtx(ctx, bf.warmup)
	deliveries.Store(0)
	errs.Store(0)
	cpu0, self0 := procCPU(tgt.pid), procCPU(os.Getpid())
	measuring.Store(true)
	start := time.Now()
	sleepCtx(ctx, bf.duration)
	stop()
	<-changerDone
	// Deliveries of the last changes are still on their way: give them a
	// moment, bounded, before the count stops.
	waitUntil(ctx, time.Now().Add(2*time.Second), func() bool { return allDelivered(clock, changes, len(pipes)) })
	measuring.Store(false)
	elapsed := time.Since(start)
	cpu1, self1 := procCPU(tgt.pid), procCPU(os.Getpid())
	stopProgress()
	lat := make([][]time.Duration, len(pipes))
	for i, p := range pipes {
		p.Close()
		for range p.Events() { // closed once its last onEvent returned
		}
		lat[i] = rcvs[i].lat
	}

	res := summarize("watch", lat, deliveries.Load(), errs.Load(), elapsed, cpu1-cpu0)
	lastP50, lastP99, incomplete := lastDelivery(clock, changes, len(pipes))
	res.LastP50Ms, res.LastP99Ms = ms(lastP50), ms(lastP99)
	firstP50 := firstDelivery(clock, changes)
	var selfUs float64 // the load generator's own CPU per delivery
	if n := deliveries.Load(); n > 0 {
		selfUs = (self1 - self0) * 1e6 / float64(n)
	}
	slices.Sort(acks)
	var ackP50 time.Duration
	if len(acks) > 0 {
		ackP50 = acks[len(acks)/2]
	}
	res.Note = fmt.Sprintf("%d watchers x %d topics, %d changes at %.0f/s; to first watcher p50 %.3f ms; to last watcher p50 %.3f ms p99 %.3f ms; %d changes not seen by every watcher; changes acknowledged after p50 %.3f ms; load generator CPU %.1f us/delivery",
		len(pipes), len(topics), len(changes), pf.changeRate, ms(firstP50), res.LastP50Ms, res.LastP99Ms, incomplete, ms(ackP50), selfUs)
	return res, nil
}

// openWatches opens the watch streams, spread over conns, each with a
// receiver from newReceiver that reads it on the stream's own read
// goroutine, and waits for each one's initial push of every topic.
func openWatches(ctx context.Context, conns []*client.Conn, pf perfFlags, topics []string, newReceiver func() *watchReceiver) ([]*client.Pipe, []*watchReceiver, error) {
	q := &wire.Watch{Topics: make([]wire.TopicVersion, len(topics))}
	for i, t := range topics {
		q.Topics[i].Topic = t
	}
	pipes := make([]*client.Pipe, 0, pf.watchers)
	rcvs := make([]*watchReceiver, 0, pf.watchers)
	fail := func(err error) ([]*client.Pipe, []*watchReceiver, error) {
		for _, p := range pipes {
			p.Close()
		}
		return nil, nil, err
	}
	for i := range pf.watchers {
		r := newReceiver()
		p, err := conns[i/pf.watchersPer].OpenWatchPipe(ctx, r.receive)
		if err != nil {
			return fail(err)
		}
		pipes = append(pipes, p)
		rcvs = append(rcvs, r)
		if err := p.Call(ctx, wire.TypeWatch, q, &wire.WatchAck{}); err != nil {
			return fail(fmt.Errorf("watch: %w", err))
		}
	}
	for i, p := range pipes {
		for rcvs[i].initial.Load() < int64(len(topics)) {
			select {
			case <-p.Done():
				return fail(fmt.Errorf("watch stream ended: %w", p.Err()))
			case <-ctx.Done():
				return fail(ctx.Err())
			case <-time.After(time.Millisecond):
			}
		}
	}
	return pipes, rcvs, nil
}

// watchReceiver checks and times one watch stream's pushes. Its receive
// runs on the stream's read goroutine (client.OpenWatchPipe), so a
// delivery's time is taken as soon as its frame is read, with no hand-off
// to another goroutine in between.
type watchReceiver struct {
	clock            *watchClock
	events           *eventCache
	measuring        *atomic.Bool
	deliveries, errs *atomic.Int64
	initial          atomic.Int64    // initial routes seen
	lat              []time.Duration // read once the pipe's events are closed
}

// latHint is how many latencies a receiver has room for before its first
// append grows the slice: growing it is an allocation and a copy on the
// read goroutine, inside the measured time.
const latHint = 256

func (r *watchReceiver) receive(f *wire.Frame) {
	now := time.Now()
	k, err := r.events.lookup(f.Body)
	if err != nil {
		r.errs.Add(1)
		return
	}
	if !k.change {
		r.initial.Add(1)
		return
	}
	d, seen := r.clock.delivered(k.topic, k.slot, now)
	if seen && r.measuring.Load() {
		r.deliveries.Add(1)
		r.lat = append(r.lat, d)
	}
}

// eventKey is what a route event says: the change (topic, slot) it shows,
// if it shows one of this run's.
type eventKey struct {
	topic, slot int
	change      bool
}

// maxCachedEvents bounds the event cache: past it, it starts over.
const maxCachedEvents = 1 << 10

// eventCache decodes each distinct route-event body once. Its map is
// replaced, never changed, so the thousand read goroutines look events up
// with no lock (a read lock's counter, shared by all of them, went back
// and forth between the cores once per delivery); a new event, one per
// change, copies it.
type eventCache struct {
	clock *watchClock
	mu    sync.Mutex // serializes replacing m
	m     atomic.Pointer[map[string]eventKey]
}

func (c *eventCache) lookup(body []byte) (eventKey, error) {
	if m := c.m.Load(); m != nil {
		if k, ok := (*m)[string(body)]; ok {
			return k, nil
		}
	}
	k, err := c.decode(body)
	if err != nil {
		return k, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var next map[string]eventKey
	if old := c.m.Load(); old != nil && len(*old) < maxCachedEvents {
		next = maps.Clone(*old)
	}
	if next == nil {
		next = make(map[string]eventKey)
	}
	next[string(body)] = k
	c.m.Store(&next)
	return k, nil
}

func (c *eventCache) decode(body []byte) (eventKey, error) {
	var ev wire.RouteEvent
	if err := wire.Unmarshal(body, &ev); err != nil {
		return eventKey{}, err
	}
	route, _, err := client.DecodeResult(&ev.Result)
	if err != nil {
		return eventKey{}, err
	}
	if len(route.Queues) == 0 {
		return eventKey{}, fmt.Errorf("route event of %s has no queues", ev.Result.Topic)
	}
	topic, ok := c.clock.index[ev.Result.Topic]
	if !ok {
		return eventKey{}, fmt.Errorf("route event of %s, a topic not watched", ev.Result.Topic)
	}
	slot := int(route.Queues[0].WriteQueues) - 2
	if slot < 0 || slot >= watchSlots {
		return eventKey{}, nil
	}
	return eventKey{topic: topic, slot: slot, change: true}, nil
}

// firstDelivery returns the p50 over changes of the time from a change to
// its first delivery: what the last delivery's time adds to it is the
// fan-out's spread.
func firstDelivery(clock *watchClock, changes []watchChange) time.Duration {
	var ds []time.Duration
	for _, c := range changes {
		if f := clock.first[c.topic*watchSlots+c.slot].Load(); f != 0 {
			ds = append(ds, time.Duration(f-c.sent.UnixNano()))
		}
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func allDelivered(clock *watchClock, changes []watchChange, watchers int) bool {
	if len(changes) == 0 {
		return true
	}
	c := changes[len(changes)-1]
	return clock.got[c.topic*watchSlots+c.slot].Load() >= int64(watchers)
}

// lastDelivery returns the p50 and p99 over changes of the time from a
// change to its delivery to the last watcher, and how many changes did not
// reach every watcher (a later change of the same topic may overtake an
// earlier one: watchers are sent the route current when they look).
func lastDelivery(clock *watchClock, changes []watchChange, watchers int) (p50, p99 time.Duration, incomplete int) {
	var ds []time.Duration
	for _, c := range changes {
		i := c.topic*watchSlots + c.slot
		if clock.got[i].Load() < int64(watchers) {
			incomplete++
			continue
		}
		ds = append(ds, time.Duration(clock.last[i].Load()-c.sent.UnixNano()))
	}
	if len(ds) == 0 {
		return 0, 0, incomplete
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)*99/100], incomplete
}
