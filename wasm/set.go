package wasm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of SetConfig.
const (
	DefaultMinThreshold         = 10 * time.Second
	DefaultMaxThreshold         = 10 * time.Minute
	DefaultMaxConsecutiveFails  = 5
	DefaultFailureWindow        = 20
	DefaultMaxWindowFailures    = 10
	DefaultMemoEntries          = 1 << 16
	DefaultMemoBytes            = 64 << 20
	DefaultMemoTTL              = time.Minute
	DefaultHeartbeatInterval    = 30 * time.Second
	DefaultSetDefaultThreshold  = 120 * time.Second
	defaultThresholdQueueLength = 1024
)

// SetConfig configures a Set. The zero value is usable.
type SetConfig struct {
	// DefaultThreshold is the node's expiry threshold without a policy, as
	// passed to registry.Config; default 120 s. Guests get it as default_ms
	// when a broker did not ask for a timeout of its own.
	DefaultThreshold time.Duration
	// HeartbeatInterval is the brokers' heartbeat interval, used to
	// estimate missed heartbeats and the heartbeat success rate; default 30 s.
	HeartbeatInterval time.Duration
	// MinThreshold and MaxThreshold bound what threshold policies may
	// return: an answer outside is a failed call; default the Host's
	// range, [10 s, 10 min].
	MinThreshold, MaxThreshold time.Duration
	// MaxConsecutiveFailures is how many failed calls in a row deactivate a
	// policy and restore the last known good one; default 5.
	MaxConsecutiveFailures int
	// FailureWindow and MaxWindowFailures deactivate a policy that fails
	// often but not in a row: MaxWindowFailures failures among the last
	// FailureWindow calls; default 10 of 20.
	FailureWindow, MaxWindowFailures int
	// RouteFailure and ConfirmFailure say what the route and confirm
	// hooks answer when their policy cannot (FailMode); default open for
	// route, closed for confirm.
	RouteFailure, ConfirmFailure FailMode
	// MemoEntries bounds the memoized route-filter results; default 65536.
	MemoEntries int
	// MemoBytes bounds the bytes the memoized results hold (routes, and
	// the topics, zones and labels they were asked for); default 64 MiB.
	MemoBytes int
	// MemoTTL bounds how long a memoized route-filter result is served, so a
	// policy that looks at now_ms is asked again; default 1 min.
	MemoTTL time.Duration
	// Store, when set, persists every change and is loaded by NewSet.
	Store *Store
	// RestoreInBackground makes NewSet return at once and restore the
	// Store's modules in the background (Restored tells when it is done):
	// a node serves, with the built-in behaviour, while persisted modules
	// compile. Errors are logged rather than returned.
	RestoreInBackground bool
	// LinkStats, when set, tells the transport's view of a broker (RTT,
	// loss) for threshold policies.
	LinkStats func(cluster, addr string) (LinkStats, bool)
	// Now defaults to time.Now; tests inject a fake clock.
	Now func() time.Time
	// Rand defaults to math/rand/v2; guests get its values as rand.
	Rand func() uint64
	// Logger defaults to the Host's.
	Logger *slog.Logger
	// OnChange, when set, is told of every change of a hook's active
	// policy (an activation, a rollback, a removal, a deactivation, a
	// restore), on a goroutine of its own, so that what depends on the
	// policy's answers is looked at again: a node pushes watchers the
	// route a new route policy gives them.
	OnChange func(Hook)
}

// LinkStats is what the transport knows about a broker's connection.
type LinkStats struct {
	RTT          time.Duration
	LossPermille uint32
}

func (c *SetConfig) setDefaults(h *Host) {
	setDur := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	setDur(&c.DefaultThreshold, DefaultSetDefaultThreshold)
	setDur(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	setDur(&c.MinThreshold, h.cfg.MinThreshold)
	setDur(&c.MaxThreshold, h.cfg.MaxThreshold)
	setDur(&c.MemoTTL, DefaultMemoTTL)
	c.MaxThreshold = max(c.MaxThreshold, c.MinThreshold)
	if c.MaxConsecutiveFailures <= 0 {
		c.MaxConsecutiveFailures = DefaultMaxConsecutiveFails
	}
	if c.FailureWindow <= 0 {
		c.FailureWindow = DefaultFailureWindow
	}
	if c.MaxWindowFailures <= 0 {
		c.MaxWindowFailures = min(DefaultMaxWindowFailures, c.FailureWindow)
	}
	c.RouteFailure = c.RouteFailure.or(FailOpen)
	c.ConfirmFailure = c.ConfirmFailure.or(FailClosed)
	if c.MemoEntries <= 0 {
		c.MemoEntries = DefaultMemoEntries
	}
	if c.MemoBytes <= 0 {
		c.MemoBytes = DefaultMemoBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.Uint64
	}
	if c.Logger == nil {
		c.Logger = h.cfg.Logger
	}
}

// Set holds the active policy of each hook. Readers load it with one
// atomic pointer read; Activate, Rollback and Remove swap it, and a module
// swapped out stays usable until the calls already using it finish, so a
// swap never fails a call. It is safe for concurrent use.
//
// Set implements registry.Thresholds and registry.ExpiryConfirmer; wire it
// as both even with no policy active: it then returns the built-in answers
// at the cost of an atomic load, and it needs to see heartbeats to report
// the heartbeat success rate to confirm policies.
type Set struct {
	host *Host
	cfg  SetConfig
	log  *slog.Logger

	mu    sync.Mutex // serializes changes and persistence
	slots [numHooks]slot
	// records keeps each hook's module statistics across activations,
	// newest last, bounded by maxRecords. Guarded by mu.
	records [numHooks][]*moduleRecord
	// fromDir is the hash of the module LoadDir last activated for each
	// hook, so a reload leaves a hook alone until its file changes; saved
	// in the Store's manifest (FromDir), so a restart does too. Guarded
	// by mu.
	fromDir [numHooks]string
	// pending holds the saved state of each hook the Store's manifest
	// names until it is restored; guarded by mu.
	pending [numHooks]*ManifestEntry
	// restoreErr says why the start's restore of each hook whose saved
	// state is still pending failed; guarded by mu.
	restoreErr [numHooks]string
	// dirRefused is each hook's policy directory file refused at its dry
	// run, with its backoff (LoadDir); guarded by mu.
	dirRefused [numHooks]dirRefusal

	memo  *memo
	thr   *thresholdCache
	beats *beatRate

	// fallbacks counts every fallback since NewSet, across activations.
	fallbacks atomic.Uint64
	restored  chan struct{} // closed when the Store's modules are restored

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

type slot struct {
	active   atomic.Pointer[binding]
	lastGood *Module // guarded by Set.mu; holds a reference
}

// binding is one activation of a module for a hook. It holds a module
// reference that it gives back once it is retired and no call uses it.
type binding struct {
	hook        Hook
	module      *Module
	activatedAt time.Time
	stats       *hookStats // the module's record for the hook, shared by its activations
	record      *moduleRecord
	health      *health // this activation's failures
	users       atomic.Int64
	retired     atomic.Bool
	once        sync.Once
}

func (b *binding) finish() {
	b.once.Do(func() { _ = b.module.Close() })
}

// NewSet returns a Set on host with no policy active, then restores the
// policies saved in cfg.Store, if any. A saved module that no longer
// validates is logged and skipped rather than failing the node's start; a
// manifest that cannot be read or parsed fails it, with the file's error.
func NewSet(ctx context.Context, host *Host, cfg SetConfig) (*Set, error) {
	cfg.setDefaults(host)
	s := &Set{
		host:  host,
		cfg:   cfg,
		log:   cfg.Logger.With("component", "policy"),
		memo:  newMemo(cfg.MemoEntries, cfg.MemoBytes),
		thr:   newThresholdCache(defaultThresholdQueueLength, cfg.MemoEntries),
		beats: newBeatRate(cfg.HeartbeatInterval),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.restored = make(chan struct{})
	var man Manifest
	if cfg.Store != nil {
		// The manifest is read now, background or not, so that a change
		// made while the modules are restored keeps what is not restored
		// yet; one that cannot be read or parsed stops the start, as a
		// corrupt kvconfig.json does: a Set started without it would
		// overwrite it at the next change and prune the modules it names.
		var err error
		if man, err = s.saved(cfg.Store); err != nil {
			s.cancel()
			return nil, err
		}
	}
	switch {
	case cfg.Store != nil && cfg.RestoreInBackground:
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer close(s.restored)
			s.restore(s.ctx, cfg.Store, man)
		}()
	case cfg.Store != nil:
		s.restore(ctx, cfg.Store, man)
		close(s.restored)
	default:
		close(s.restored)
	}
	s.wg.Add(1)
	go s.refreshThresholds()
	return s, nil
}

// Active reports whether hook h has an active module.
func (s *Set) Active(h Hook) bool { return h < numHooks && s.slots[h].active.Load() != nil }

// Restored is closed once the modules of the Store are restored (at once
// unless SetConfig.RestoreInBackground).
func (s *Set) Restored() <-chan struct{} { return s.restored }

// Close stops the Set's background work and drops its module references.
// Calls after Close get the built-in behaviour.
func (s *Set) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.slots {
		sl := &s.slots[i]
		if b := sl.active.Swap(nil); b != nil {
			s.retire(b)
		}
		if sl.lastGood != nil {
			_ = sl.lastGood.Close()
			sl.lastGood = nil
		}
	}
	return nil
}

// acquire returns the active binding of a hook, marked in use, or nil.
// The caller must call done. A binding retired between the load and the
// mark is given back and the new active one is taken instead, so a call
// never runs on a module that is being closed.
func (s *Set) acquire(h Hook) *binding {
	for {
		b := s.slots[h].active.Load()
		if b == nil {
			return nil
		}
		b.users.Add(1)
		if !b.retired.Load() {
			return b
		}
		s.done(b)
	}
}

func (s *Set) done(b *binding) {
	if b.users.Add(-1) == 0 && b.retired.Load() {
		b.finish()
	}
}

// retire marks a binding swapped out; its module reference is given back
// when its last call ends.
func (s *Set) retire(b *binding) {
	b.retired.Store(true)
	if b.users.Load() == 0 {
		b.finish()
	}
}

// newBinding takes a reference to m for a new activation. With s.mu held.
func (s *Set) newBinding(h Hook, m *Module, at time.Time) *binding {
	s.host.retain(m)
	return s.bindingOf(h, m, at)
}

// bindingOf makes an activation of m, whose reference the caller gives
// it. With s.mu held.
func (s *Set) bindingOf(h Hook, m *Module, at time.Time) *binding {
	m.pools[h].warm() // instances ready before the first call needs one
	rec := s.record(h, m)
	return &binding{hook: h, module: m, activatedAt: at, stats: &rec.stats, record: rec, health: newHealth(s.cfg.FailureWindow)}
}

// maxRecords bounds the modules whose statistics a hook remembers.
const maxRecords = 8

// moduleRecord is what a Set remembers of a module for one hook: its
// cumulative call statistics and why it was last deactivated.
type moduleRecord struct {
	hash  string
	size  int
	stats hookStats
	// proven is set when a saved manifest says the module had answered
	// real calls well before a restart.
	proven        bool
	deactivated   string // the last deactivation's cause, empty if none
	deactivatedAt time.Time
}

// record returns the record of m for hook h, creating it and forgetting
// the oldest one beyond maxRecords. With s.mu held.
func (s *Set) record(h Hook, m *Module) *moduleRecord {
	recs := s.records[h]
	for i, r := range recs {
		if r.hash == m.hash {
			// Most recently used last, so eviction takes the stalest.
			s.records[h] = append(append(recs[:i:i], recs[i+1:]...), r)
			return r
		}
	}
	r := &moduleRecord{hash: m.hash, size: m.Size()}
	if len(recs) >= maxRecords {
		recs = slices.Delete(recs, 0, 1)
	}
	s.records[h] = append(recs, r)
	return r
}

// Activate makes m the active policy of hook h; the module it replaces
// becomes the last known good. The Set keeps its own reference to m: the
// caller still Closes its own. Activating the module already active is a
// no-op. With a Store, the change is saved before it takes effect.
func (s *Set) Activate(h Hook, m *Module) error { return s.ActivateAs(h, m, Change{}) }

// Change says who asked for a change and from where, for the one log line
// each change gets.
type Change struct {
	// By is the operator's identity (a certificate name), empty when the
	// node changed something by itself.
	By string
	// Source is where the module came from: upload, a directory, ...
	Source string
}

func (c Change) attrs() []any {
	var out []any
	if c.By != "" {
		out = append(out, "by", c.By)
	}
	if c.Source != "" {
		out = append(out, "source", c.Source)
	}
	return out
}

// ActivateAs is Activate, logged as the change c.
func (s *Set) ActivateAs(h Hook, m *Module, c Change) error {
	if h >= numHooks {
		return fmt.Errorf("activate: %w: %d", ErrUnknownHook, h)
	}
	if !m.Implements(h) {
		return fmt.Errorf("activate %.12s as %s: %w", m.hash, h, ErrHookAbsent)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return fmt.Errorf("activate %s: policy set %w", h, ErrClosed)
	}
	sl := &s.slots[h]
	old := sl.active.Load()
	if old != nil && old.module == m {
		return nil
	}
	lastGood := sl.lastGood
	if old != nil {
		lastGood = old.module
	}
	nb := s.newBinding(h, m, s.cfg.Now())
	if err := s.persist(h, nb, lastGood); err != nil {
		s.retire(nb)
		return fmt.Errorf("activate %.12s as %s: %w", m.hash, h, err)
	}
	s.swap(h, nb, lastGood)
	s.log.Info("policy activated", append([]any{"hook", h.String(), "hash", m.hash, "size", m.Size()}, c.attrs()...)...)
	return nil
}

// Rollback swaps the active policy of hook h with its last known good, so
// a second Rollback undoes the first. After Remove, Rollback restores the
// removed policy.
func (s *Set) Rollback(h Hook) error { return s.RollbackAs(h, Change{}) }

// RollbackAs is Rollback, logged as the change c.
func (s *Set) RollbackAs(h Hook, c Change) error {
	if h >= numHooks {
		return fmt.Errorf("rollback: %w: %d", ErrUnknownHook, h)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := &s.slots[h]
	if sl.lastGood == nil {
		return fmt.Errorf("rollback %s: %w", h, ErrNoLastGood)
	}
	var newLastGood *Module
	if old := sl.active.Load(); old != nil {
		newLastGood = old.module
	}
	nb := s.newBinding(h, sl.lastGood, s.cfg.Now())
	if err := s.persist(h, nb, newLastGood); err != nil {
		s.retire(nb)
		return fmt.Errorf("rollback %s: %w", h, err)
	}
	s.swap(h, nb, newLastGood)
	s.log.Info("policy rolled back", append([]any{"hook", h.String(), "hash", nb.module.hash}, c.attrs()...)...)
	return nil
}

// Remove deactivates the policy of hook h, which then gets the built-in
// behaviour; the removed module becomes the last known good, so Rollback
// undoes a Remove.
func (s *Set) Remove(h Hook) error { return s.RemoveAs(h, Change{}) }

// RemoveAs is Remove, logged as the change c.
func (s *Set) RemoveAs(h Hook, c Change) error {
	if h >= numHooks {
		return fmt.Errorf("remove: %w: %d", ErrUnknownHook, h)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := &s.slots[h]
	old := sl.active.Load()
	if old == nil && s.pending[h] != nil {
		// Saved but not restored (ABI.md): removing it drops what was
		// saved, or it would come back at the next start.
		saved := s.pending[h].Active
		if err := s.persist(h, nil, sl.lastGood); err != nil {
			return fmt.Errorf("remove %s: %w", h, err)
		}
		s.pending[h] = nil
		s.log.Info("saved policy removed", append([]any{"hook", h.String(), "hash", saved}, c.attrs()...)...)
		return nil
	}
	if old == nil {
		return nil
	}
	if err := s.persist(h, nil, old.module); err != nil {
		return fmt.Errorf("remove %s: %w", h, err)
	}
	s.swap(h, nil, old.module)
	s.log.Info("policy removed", append([]any{"hook", h.String(), "hash", old.module.hash}, c.attrs()...)...)
	return nil
}

// swap installs nb (nil for none) and lastGood in slot h and retires the
// binding it replaces. With s.mu held.
func (s *Set) swap(h Hook, nb *binding, lastGood *Module) {
	s.pending[h] = nil // a change wins over the saved state
	sl := &s.slots[h]
	if lastGood != sl.lastGood {
		if lastGood != nil {
			s.host.retain(lastGood)
		}
		if sl.lastGood != nil {
			_ = sl.lastGood.Close()
		}
		sl.lastGood = lastGood
	}
	if old := sl.active.Swap(nb); old != nil {
		s.retire(old)
	}
	s.memo.clear()
	s.changed(h)
}

// changed tells OnChange that hook h's active policy changed.
func (s *Set) changed(h Hook) {
	if s.cfg.OnChange != nil {
		go s.cfg.OnChange(h)
	}
}

// succeeded records a good call.
func (s *Set) succeeded(b *binding, took time.Duration) {
	b.stats.calls.Add(1)
	b.stats.successes.Add(1)
	b.stats.times.record(took)
	b.health.record(false)
}

// failed records a call that fell back to the built-in behaviour. A
// failure of the guest also counts towards deactivation; one caused by the
// caller giving up (ctx done) does not.
func (s *Set) failed(ctx context.Context, b *binding, took time.Duration, err error) {
	b.stats.calls.Add(1)
	b.stats.fallbacks.Add(1)
	s.fallbacks.Add(1)
	if errors.Is(err, ErrBusy) || errors.Is(err, ErrBadInput) || errors.Is(err, ErrBudget) || ctx.Err() != nil && errors.Is(err, ErrTimeout) {
		return
	}
	b.stats.errors.Add(1)
	if took > 0 {
		b.stats.times.record(took)
	}
	streak, failures, calls := b.health.record(true)
	s.log.Debug("policy call failed", "hook", b.hook.String(), "hash", b.module.hash, "err", err)
	switch {
	case errors.Is(err, ErrStackOverflow):
		s.deactivate(b, "a stack overflow", err)
	case streak >= s.cfg.MaxConsecutiveFailures:
		s.deactivate(b, fmt.Sprintf("%d failures in a row", streak), err)
	case failures >= s.cfg.MaxWindowFailures:
		s.deactivate(b, fmt.Sprintf("%d failures in the last %d calls", failures, calls), err)
	}
}

// deactivate replaces a failing binding with the last known good module
// — one that has answered real traffic well for this hook — or with the
// built-in behaviour, unless it was replaced already.
func (s *Set) deactivate(b *binding, rule string, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := &s.slots[b.hook]
	if sl.active.Load() != b {
		return
	}
	b.record.deactivated = rule + ": " + cause.Error()
	b.record.deactivatedAt = s.cfg.Now()
	var nb *binding
	restored := ""
	if lg := sl.lastGood; lg != nil && lg != b.module && s.proven(b.hook, lg) {
		nb = s.newBinding(b.hook, lg, s.cfg.Now())
		restored = lg.hash
	}
	if err := s.persist(b.hook, nb, nil); err != nil {
		s.log.Error("policy deactivation not saved", "hook", b.hook.String(), "err", err)
	}
	s.swap(b.hook, nb, nil)
	if restored == "" {
		restored = "built-in behaviour"
	}
	s.log.Warn("policy deactivated", "hook", b.hook.String(), "hash", b.module.hash, "rule", rule,
		"reason", cause.Error(), "restored", restored)
}

// proven reports whether m has answered real calls of hook h well. With
// s.mu held.
func (s *Set) proven(h Hook, m *Module) bool {
	for _, r := range s.records[h] {
		if r.hash == m.hash {
			return r.proven || r.stats.successes.Load() > 0
		}
	}
	return false
}

// Status is the state of one hook.
type Status struct {
	Hook Hook
	// Active is the active module; nil when the hook has the built-in
	// behaviour.
	Active *ModuleInfo
	// LastGood is what Rollback would restore; nil when nothing.
	LastGood *ModuleInfo
	// ActivatedAt is when Active was activated.
	ActivatedAt time.Time
	// Calls, Errors and Fallbacks count the calls of the active module for
	// this hook, over all its activations: every call, those the guest
	// failed, and those answered with the built-in behaviour (every error,
	// plus calls that could not get an instance before their deadline).
	Calls, Errors, Fallbacks uint64
	// P50 and P99 are call-time quantiles, within 25%.
	P50, P99 time.Duration
	// Modules are the statistics of every module this hook remembers
	// (active, last good, replaced or deactivated), oldest first.
	Modules []ModuleStats
	// Saved is the hash of the module saved as the hook's active one
	// that is not in use: it is being restored (the start's restore runs in the
	// background, see Restored), or it could not be, and SavedError says
	// why; it is tried again at the next start. The hook has the built-in
	// behaviour meanwhile. Empty once the hook is restored or changed.
	Saved      string
	SavedError string
}

// ModuleStats is the record of one module for one hook.
type ModuleStats struct {
	ModuleInfo
	// State is active, last_good, deactivated or replaced.
	State                               string
	Calls, Errors, Fallbacks, Successes uint64
	// Deactivated says why the module was last deactivated, if it was.
	Deactivated   string
	DeactivatedAt time.Time
	// Times is the call-time histogram.
	Times HistogramSnapshot
}

// HistogramSnapshot is a call-time histogram: cumulative counts at upper
// bounds, the total count and the sum.
type HistogramSnapshot struct {
	Upper      []time.Duration
	Cumulative []uint64
	Count      uint64
	Sum        time.Duration
}

// ModuleInfo identifies a module.
type ModuleInfo struct {
	Hash string
	Size int
}

// List returns the status of every hook, in ABI order.
func (s *Set) List() []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Status, 0, numHooks)
	for _, h := range Hooks {
		sl := &s.slots[h]
		st := Status{Hook: h}
		if lg := sl.lastGood; lg != nil {
			st.LastGood = &ModuleInfo{Hash: lg.hash, Size: lg.Size()}
		}
		active := sl.active.Load()
		if b := active; b != nil {
			st.Active = &ModuleInfo{Hash: b.module.hash, Size: b.module.Size()}
			st.ActivatedAt = b.activatedAt
			st.Calls = b.stats.calls.Load()
			st.Errors = b.stats.errors.Load()
			st.Fallbacks = b.stats.fallbacks.Load()
			st.P50 = b.stats.times.quantile(0.5)
			st.P99 = b.stats.times.quantile(0.99)
		}
		if p := s.pending[h]; p != nil && p.Active != "" {
			st.Saved, st.SavedError = p.Active, s.restoreErr[h]
		}
		for _, r := range s.records[h] {
			ms := ModuleStats{ModuleInfo: ModuleInfo{Hash: r.hash, Size: r.size},
				Calls: r.stats.calls.Load(), Errors: r.stats.errors.Load(), Fallbacks: r.stats.fallbacks.Load(),
				Successes: r.stats.successes.Load(), Deactivated: r.deactivated, DeactivatedAt: r.deactivatedAt}
			ms.Times.Upper, ms.Times.Cumulative, ms.Times.Count, ms.Times.Sum = r.stats.times.Buckets()
			switch {
			case active != nil && active.module.hash == r.hash:
				ms.State = "active"
			case sl.lastGood != nil && sl.lastGood.hash == r.hash:
				ms.State = "last_good"
			case r.deactivated != "":
				ms.State = "deactivated"
			default:
				ms.State = "replaced"
			}
			st.Modules = append(st.Modules, ms)
		}
		out = append(out, st)
	}
	return out
}
