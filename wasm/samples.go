package wasm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/edgereg/edgereg/wire"
)

// sampleRoute is the route of the dry run: two zones, a group whose master
// is gone, and a read-only group, so zone and permission rules both have
// something to act on.
func sampleRoute() wire.Route {
	return wire.Route{
		Queues: []wire.QueueData{
			{BrokerName: "broker-a", ReadQueues: 8, WriteQueues: 8, Perm: wire.PermRead | wire.PermWrite},
			{BrokerName: "broker-b", ReadQueues: 8, WriteQueues: 8, Perm: wire.PermRead | wire.PermWrite},
			{BrokerName: "broker-c", ReadQueues: 4, Perm: wire.PermRead},
		},
		Brokers: []wire.BrokerData{
			{Cluster: "DefaultCluster", Name: "broker-a", Zone: "zone-1", Addrs: map[int64]string{0: "10.0.1.1:10911", 1: "10.0.1.2:10911"}},
			{Cluster: "DefaultCluster", Name: "broker-b", Zone: "zone-2", Addrs: map[int64]string{0: "10.0.2.1:10911"}},
			{Cluster: "DefaultCluster", Name: "broker-c", Zone: "zone-2", Addrs: map[int64]string{1: "10.0.2.2:10911"}},
		},
	}
}

func sampleRouteInput() (RouteFilterInput, wire.Route, error) {
	r := sampleRoute()
	b, err := wire.Marshal(&r)
	if err != nil {
		return RouteFilterInput{}, r, fmt.Errorf("encode sample route: %w", err)
	}
	return RouteFilterInput{
		Client: ClientInfo{Addr: "10.0.9.9", Zone: "zone-1", Labels: map[string]string{"app": "dry-run"}},
		Topic:  "DryRunTopic",
		Route:  b,
		NowMs:  time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(),
		Rand:   0x9e3779b97f4a7c15,
	}, r, nil
}

func sampleThresholdInput() ThresholdInput {
	return ThresholdInput{
		Broker: BrokerInfo{Cluster: "DefaultCluster", Name: "broker-a", ID: 0, Addr: "10.0.1.1:10911", Zone: "zone-1"},
		Stats: BrokerStats{
			Heartbeats:     42,
			IntervalsMs:    []int64{30010, 29990, 30500, 60020, 29800, 30100, 30000, 29950},
			MeanIntervalMs: 33796, JitterMs: 9810, RTTMs: 40, LossPermille: 111, Missed: 1,
		},
		DefaultMs: 120_000,
		NowMs:     time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(),
		Rand:      0x9e3779b97f4a7c15,
	}
}

func sampleConfirmInput() ConfirmInput {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	due := make([]DueLease, 3)
	for i := range due {
		due[i] = DueLease{
			Cluster: "DefaultCluster", Addr: fmt.Sprintf("10.0.3.%d:10911", i+1), Name: fmt.Sprintf("broker-%d", i),
			Epoch: uint64(100 + i), LastHeartbeatMs: now - 130_000, DeadlineMs: now - 10_000,
		}
	}
	return ConfirmInput{Due: due, Stats: ConfirmStats{Leases: 20, Due: 3, HeartbeatSuccessPermille: 1000}, NowMs: now, Rand: 0x9e3779b97f4a7c15}
}

// dryRun instantiates the module, checks its ABI version and declared
// hooks, and calls every hook it implements once on the sample inputs,
// with the same deadline and checks as real calls.
func (m *Module) dryRun(ctx context.Context) error {
	first := m.pools[m.Hooks()[0]]
	in, err := first.getNew(ctx)
	if err != nil {
		return dryRunError(m.hash, "", err)
	}
	ve, timedOut := m.checkInstance(ctx, in)
	if timedOut && ctx.Err() == nil {
		// The first calls into a fresh instance missed their deadline:
		// on a loaded node, not the module's doing; once more, on a
		// fresh instance (TestDryRunRetriesAMissedVersionCallOnce).
		first.put(in, false)
		if in, err = first.getNew(ctx); err != nil {
			return dryRunError(m.hash, "", err)
		}
		ve, _ = m.checkInstance(ctx, in)
	}
	first.put(in, ve == nil)
	if ve != nil {
		return ve
	}
	for _, h := range Hooks {
		if !m.hooks.has(h) && m.pools[h] != nil {
			m.pools[h].close() // not in the module's edgereg_hooks mask
			m.pools[h] = nil
		}
	}
	for _, h := range m.Hooks() {
		// Each hook's first instance is made here, so a module whose
		// instantiation fails is refused with the reason.
		in, err := m.pools[h].getNew(ctx)
		if err != nil {
			return dryRunError(m.hash, h.String()+": ", err)
		}
		m.pools[h].put(in, true)
		if err := m.dryRunHook(ctx, h); err != nil {
			return dryRunError(m.hash, h.String()+": ", err)
		}
	}
	return nil
}

// dryRunError refuses the module for a failed dry run, unless the node,
// not the module, kept it from running: the node-wide instance budget
// spent, or every route-call slot taken past the call's deadline. That is
// ErrBusy, not a refusal: the same bytes may pass a moment later, and the
// operator is told to retry (before, "bad request": "module failed its
// dry run: ... the instance budget is spent"; TestDryRunOnSpentBudgetIsBusy).
func dryRunError(hash, what string, err error) error {
	if errors.Is(err, ErrBusy) {
		return fmt.Errorf("policy module %.12s: dry run: %s%w", hash, what, err)
	}
	return refuse(hash, ErrDryRun, "%s%v", what, err)
}

// checkInstance asks a fresh instance for its ABI version and, if it
// exports edgereg_hooks, for the hooks it really implements; timedOut
// tells a refusal for a missed deadline (the instance is then closed).
func (m *Module) checkInstance(ctx context.Context, in *instance) (ve *ValidationError, timedOut bool) {
	v, err := callI32(ctx, in.mod, exportABIVersion, m.host.cfg.CallTimeout)
	if err != nil {
		return refuse(m.hash, ErrDryRun, "%s: %v", exportABIVersion, err), errors.Is(err, ErrTimeout)
	}
	if v != ABIVersion {
		return refuse(m.hash, ErrABIVersion, "%s returned %d, this host implements %d", exportABIVersion, v, ABIVersion), false
	}
	if in.mod.ExportedFunction(exportHooks) == nil {
		return nil, false
	}
	mask, err := callI32(ctx, in.mod, exportHooks, m.host.cfg.CallTimeout)
	if err != nil {
		return refuse(m.hash, ErrDryRun, "%s: %v", exportHooks, err), errors.Is(err, ErrTimeout)
	}
	declared := hookSet(mask)
	if uint32(mask) > 1<<numHooks-1 || declared&^m.hooks != 0 {
		return refuse(m.hash, ErrExport, "%s returned %#x, naming hooks the module does not export", exportHooks, mask), false
	}
	m.hooks = declared
	for _, h := range Hooks {
		if !declared.has(h) {
			in.hooks[h] = nil
		}
	}
	if m.hooks == 0 {
		return refuse(m.hash, ErrNoHooks, "%s returned 0", exportHooks), false
	}
	return nil, false
}

// testHookCallI32Name, when set, renames the export callI32 calls: tests
// use it to make one call miss its deadline (an export that loops), as a
// loaded node makes a call do.
var testHookCallI32Name func(name string) string

func callI32(ctx context.Context, mod api.Module, name string, timeout time.Duration) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if testHookCallI32Name != nil {
		name = testHookCallI32Name(name)
	}
	res, err := mod.ExportedFunction(name).Call(ctx)
	if err != nil {
		return 0, callError(err)
	}
	return int32(uint32(res[0])), nil
}

// dryRunHook calls hook h on each of its sample inputs, which cover the
// kinds of input real traffic brings (a client with and without zone and
// labels, a one-group route; a broker's first heartbeat and a steady one,
// a broker that asked for its own timeout; one due lease and several, a
// mass expiry with few heartbeats arriving), with the same checks as real
// calls: the same threshold range, the same output rules.
func (m *Module) dryRunHook(ctx context.Context, h Hook) error {
	cfg := &m.host.cfg
	retry := m.retryOnce(ctx, h)
	switch h {
	case HookRouteFilter:
		for i, in := range sampleRouteInputs() {
			var orig wire.Route
			if err := wire.Unmarshal(in.Route, &orig); err != nil {
				return err
			}
			if err := retry(func() error { _, _, err := m.filterRoute(ctx, &in, &orig); return err }); err != nil {
				return fmt.Errorf("sample %d: %w", i+1, err)
			}
		}
	case HookExpiryThreshold:
		for i, in := range sampleThresholdInputs() {
			if err := retry(func() error {
				_, _, err := m.expiryThreshold(ctx, &in, cfg.MinThreshold, cfg.MaxThreshold)
				return err
			}); err != nil {
				return fmt.Errorf("sample %d: %w", i+1, err)
			}
		}
	case HookExpiryConfirm:
		for i, in := range sampleConfirmInputs() {
			if err := retry(func() error { _, _, err := m.confirmExpiry(ctx, &in); return err }); err != nil {
				return fmt.Errorf("sample %d: %w", i+1, err)
			}
		}
	default:
		return fmt.Errorf("%w: %d", ErrUnknownHook, h)
	}
	return nil
}

// retryOnce returns a runner of hook h's dry-run calls that tries one
// call again, once per hook, when it missed its deadline: on a loaded
// node a valid module's call can miss 20 ms (a fresh instance's first
// call pays for page faults of its memory, the scheduler for everyone
// else), and refusing the module for that made uploads fail at random.
// The timed-out instance was closed; the retry gets a fresh one made
// here, off the call's deadline, as the dry run's first instance was. A
// module that misses the deadline again is refused: one stuck in a loop
// costs two deadlines, not one.
func (m *Module) retryOnce(ctx context.Context, h Hook) func(call func() error) error {
	retried := false
	return func(call func() error) error {
		err := call()
		if err == nil || retried || !errors.Is(err, ErrTimeout) || errors.Is(err, ErrBusy) || ctx.Err() != nil {
			return err
		}
		retried = true
		in, ierr := m.pools[h].getNew(ctx)
		if ierr != nil {
			return err
		}
		m.pools[h].put(in, true)
		return call()
	}
}

// sampleRouteInputs are the dry run's route filter inputs; the first is
// SampleInput's.
func sampleRouteInputs() []RouteFilterInput {
	first, _, _ := sampleRouteInput()
	bare := first
	bare.Client = ClientInfo{}
	one := wire.Route{
		Queues:  []wire.QueueData{{BrokerName: "broker-a", ReadQueues: 4, WriteQueues: 4, Perm: wire.PermRead | wire.PermWrite}},
		Brokers: []wire.BrokerData{{Cluster: "DefaultCluster", Name: "broker-a", Addrs: map[int64]string{0: "10.0.1.1:10911"}}},
	}
	single := first
	single.Client = ClientInfo{Addr: "10.0.9.10", Zone: "zone-2"}
	single.Route, _ = wire.Marshal(&one)
	return []RouteFilterInput{first, bare, single}
}

func sampleThresholdInputs() []ThresholdInput {
	steady := sampleThresholdInput()
	first := steady
	first.Stats = BrokerStats{Heartbeats: 0, IntervalsMs: []int64{}}
	asked := steady
	asked.DefaultMs = 30_000
	asked.Stats.RTTMs, asked.Stats.LossPermille, asked.Stats.Missed = 0, 0, 0
	return []ThresholdInput{steady, first, asked}
}

func sampleConfirmInputs() []ConfirmInput {
	several := sampleConfirmInput()
	one := several
	one.Due = several.Due[:1]
	one.Stats.Due = 1
	wave := several
	wave.Stats = ConfirmStats{Leases: 3, Due: 3, HeartbeatSuccessPermille: 150}
	return []ConfirmInput{several, one, wave}
}
