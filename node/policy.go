package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/edgereg/edgereg/node/registry"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgereg/edgereg/wasm"
	"github.com/edgereg/edgereg/wire"
)

// Policy defaults.
const (
	DefaultMaxPolicyUploadsPerMinute = 10
	DefaultPolicyDirInterval         = 10 * time.Second
	// DefaultPolicyUploadTimeout bounds an upload whose sender did not say
	// how long it waits (PolicyPush.TimeoutMs); MaxPolicyUploadTimeout
	// bounds any upload.
	DefaultPolicyUploadTimeout = 30 * time.Second
	MaxPolicyUploadTimeout     = 5 * time.Minute
	// maxPolicyUploadsAtOnce bounds the policy uploads and tests handled
	// at once (each may take minutes; the host compiles 2 modules at once),
	// on slots of their own so they never hold a broker's worker.
	maxPolicyUploadsAtOnce = 4
)

// policies binds the WebAssembly policy host to the node: the Set filters
// routes and decides thresholds and expiries; operators change it over
// QUIC; a policy directory (a Kubernetes ConfigMap) feeds it too.
type policies struct {
	host    *wasm.Host
	set     *wasm.Set
	uploads *rateLimit // policy-push
	tests   *rateLimit // policy-test: its own budget, so tests never block a push
	dirMu   sync.Mutex
	dirSig  string // what the policy directory held when last loaded
}

// newPolicies starts the policy host and set; watches is told when the
// route policy changes, so that every watcher is pushed the route the new
// policy gives it.
func newPolicies(cfg Config, watches *watchHub) (*policies, error) {
	ctx := context.Background()
	host, err := wasm.NewHost(ctx, wasm.HostConfig{
		CacheDir:    cfg.PolicyCacheDir,
		CallTimeout: cfg.PolicyCallTimeout,
		Logger:      cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("policy host: %w", err)
	}
	store, err := wasm.OpenStore(filepath.Join(cfg.DataDir, "policies"))
	if err != nil {
		host.Close(ctx)
		return nil, fmt.Errorf("policy store: %w", err)
	}
	// Saved modules are restored in the background: the node serves (with
	// the built-in behaviour) and reports ready while they compile.
	set, err := wasm.NewSet(ctx, host, wasm.SetConfig{
		DefaultThreshold:    cfg.ExpiryThreshold,
		RouteFailure:        cfg.PolicyRouteFailure,
		ConfirmFailure:      cfg.PolicyConfirmFailure,
		HeartbeatInterval:   cfg.HeartbeatInterval,
		Store:               store,
		RestoreInBackground: true,
		Now:                 cfg.Clock.Now,
		Logger:              cfg.Logger,
		OnChange: func(h wasm.Hook) {
			if h == wasm.HookRouteFilter {
				watches.markAll()
			}
		},
	})
	if err != nil {
		host.Close(ctx)
		return nil, fmt.Errorf("restore policies: %w", err)
	}
	if cfg.PolicyDir == "" {
		// No directory: one given at a later start is loaded in full,
		// not skipped for the files it gave before.
		if err := set.ForgetDir(); err != nil {
			cfg.Logger.Warn("policy store: could not save that no policy directory is used", "err", err)
		}
	}
	return &policies{host: host, set: set,
		uploads: newRateLimit(cfg.MaxPolicyUploadsPerMinute, time.Minute, cfg.Clock),
		tests:   newRateLimit(cfg.MaxPolicyUploadsPerMinute, time.Minute, cfg.Clock),
	}, nil
}

func (p *policies) close() {
	p.set.Close()
	p.host.Close(context.Background())
}

// filter returns the route a client may see, by the active route policy;
// an error (wasm.ErrFailedClosed) when the policy could not answer and the
// route hook fails closed. ctx may carry a read budget (readContext).
func (p *policies) filter(ctx context.Context, addr string, attrs wire.ClientAttrs, topic string, version uint64, body []byte) ([]byte, uint64, error) {
	if testHookFilter != nil {
		if err := testHookFilter(topic); err != nil {
			return nil, 0, err
		}
	}
	out, v, err := p.set.RouteFilter(ctx, addr, attrs, topic, version, body)
	if err != nil && !errors.Is(err, wasm.ErrFailedClosed) {
		err = nil // fail-open: ctx ended, and the caller sends the unfiltered route
	}
	return out, v, err
}

// testHookFilter, when set, runs before each route policy call with its
// topic; an error it returns is the call's. Tests use it for a policy that
// fails closed for a while (wasm.ErrFailedClosed), as one whose instances
// are all busy does, which no module can be made to do on cue.
var testHookFilter func(topic string) error

// readContext bounds the route policy time of one request by budget, so
// a read of 10,000 topics cannot hold the policy pool for 10,000 guest
// calls.
func (p *policies) readContext(budget time.Duration) context.Context {
	if !p.set.Active(wasm.HookRouteFilter) {
		// No guest call to budget: a read without a route policy costs
		// no allocation for it. A policy pushed during this read is
		// unbudgeted for it alone; every call still has its deadline.
		return context.Background()
	}
	return wasm.WithReadBudget(context.Background(), budget)
}

// parallel reports whether a read of count topics is worth spreading over
// goroutines (eachTopic): only with a route policy active, whose guest
// calls run on an instance pool. A read without one runs in turn on the
// caller's goroutine, with no closure to build.
func (p *policies) parallel(count int) bool {
	return count > 1 && p.set.Active(wasm.HookRouteFilter) && p.host.Config().PoolSize > 1
}

// eachTopic runs fn for 0..count-1: with a route policy active, on up to
// the instance pool's size of goroutines, so a read of many topics costs
// about count/pool guest calls in time rather than count; without one, in
// turn on the caller's goroutine.
func (p *policies) eachTopic(count int, fn func(i int)) {
	if !p.set.Active(wasm.HookRouteFilter) {
		for i := range count {
			fn(i)
		}
		return
	}
	workers := min(p.host.Config().PoolSize, count)
	if workers <= 1 {
		for i := range count {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < count; i = int(next.Add(1) - 1) {
				fn(i)
			}
		})
	}
	wg.Wait()
}

func (n *Node) dispatchPolicy(cs *connState, f *wire.Frame) (any, error) {
	by := wasm.Change{By: cs.peer.Name}
	switch f.Type {
	case wire.TypePolicyPush:
		return decodeRun(f, func(r *wire.PolicyPush) (any, error) { return n.policyPush(r, by) })
	case wire.TypePolicyList:
		return n.policyList(), nil
	case wire.TypePolicyRollback, wire.TypePolicyRemove:
		return decodeRun(f, func(h *wire.PolicyHook) (any, error) { return n.policyChange(f.Type, h.Hook, by) })
	case wire.TypePolicyTest:
		return decodeRun(f, n.policyTest)
	}
	return nil, wire.Errorf(wire.CodeUnknownType, "unknown message type %d", uint16(f.Type))
}

func parseHook(name string) (wasm.Hook, error) {
	h, err := wasm.ParseHook(name)
	if err != nil {
		return 0, wire.Errorf(wire.CodeBadRequest, "unknown policy hook %q: use route, expiry or confirm", name)
	}
	return h, nil
}

// uploadContext bounds an upload by what its sender said it waits
// (timeoutMs), or by the node's default, and never beyond the maximum.
func uploadContext(timeoutMs int64) (context.Context, context.CancelFunc) {
	d := DefaultPolicyUploadTimeout
	if timeoutMs > 0 {
		d = time.Duration(min(timeoutMs, MaxPolicyUploadTimeout.Milliseconds())) * time.Millisecond
	}
	return context.WithTimeout(context.Background(), d)
}

// validateModule checks an uploaded module within limit and ctx.
func (n *Node) validateModule(ctx context.Context, limit *rateLimit, what, hookName string, module []byte) (wasm.Hook, *wasm.Module, error) {
	h, err := parseHook(hookName)
	if err != nil {
		return 0, nil, err
	}
	if !limit.allow() {
		return 0, nil, wire.Errorf(wire.CodeOverloaded, "more than %d policy %ss in a minute: wait and retry", n.cfg.MaxPolicyUploadsPerMinute, what)
	}
	m, err := n.policies.host.Validate(ctx, module)
	if ctx.Err() != nil {
		if m != nil {
			m.Close()
		}
		return 0, nil, wire.Errorf(wire.CodeTimeout, "policy %s did not finish within its deadline: nothing changed", what)
	}
	var refused *wasm.ValidationError
	if errors.As(err, &refused) {
		return 0, nil, wire.Errorf(wire.CodeBadRequest, "policy module refused: %v", err)
	}
	if errors.Is(err, wasm.ErrBusy) {
		// The node's instance budget or route-call slots were all taken
		// during the dry run: the module was not found at fault.
		return 0, nil, wire.Errorf(wire.CodeOverloaded, "policy %s could not run its dry run now, the node is busy (%v): retry; nothing changed", what, err)
	}
	if err != nil {
		// The node's failure (its compilation cache, a compile child
		// that could not start), not the module's: worth a retry.
		n.log.Error("policy module not validated", "op", what, "err", err)
		return 0, nil, wire.Errorf(wire.CodeInternal, "policy %s failed on the node, not for the module: %v; nothing changed", what, err)
	}
	if !m.Implements(h) {
		m.Close()
		return 0, nil, wire.Errorf(wire.CodeBadRequest, "policy module %.12s does not implement the %s hook (it has %v)", m.Hash(), h, m.Hooks())
	}
	return h, m, nil
}

// policyPush validates and activates a module. An upload that does not
// finish within its deadline changes nothing: the sender has given up and
// was told it failed.
func (n *Node) policyPush(req *wire.PolicyPush, by wasm.Change) (any, error) {
	ctx, cancel := uploadContext(req.TimeoutMs)
	defer cancel()
	h, m, err := n.validateModule(ctx, n.policies.uploads, "upload", req.Hook, req.Module)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if ctx.Err() != nil {
		return nil, wire.Errorf(wire.CodeTimeout, "policy upload did not finish within its deadline: nothing changed")
	}
	by.Source = "upload"
	if err := n.policies.set.ActivateAs(h, m, by); err != nil {
		return nil, fmt.Errorf("activate policy: %w", err)
	}
	return n.policyInfo(h), nil
}

func (n *Node) policyChange(t wire.Type, hookName string, by wasm.Change) (any, error) {
	h, err := parseHook(hookName)
	if err != nil {
		return nil, err
	}
	if t == wire.TypePolicyRollback {
		err = n.policies.set.RollbackAs(h, by)
	} else {
		err = n.policies.set.RemoveAs(h, by)
	}
	if errors.Is(err, wasm.ErrNoLastGood) {
		return nil, wire.Errorf(wire.CodeNotFound, "the %s hook has no earlier policy to roll back to", h)
	}
	if err != nil {
		return nil, err
	}
	return n.policyInfo(h), nil
}

func (n *Node) policyTest(req *wire.PolicyTest) (any, error) {
	ctx, cancel := uploadContext(req.TimeoutMs)
	defer cancel()
	h, m, err := n.validateModule(ctx, n.policies.tests, "test", req.Hook, req.Module)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	input := []byte(req.Input)
	if len(input) == 0 {
		if input, err = wasm.SampleInput(h); err != nil {
			return nil, err
		}
	}
	cfg := n.policies.host.Config()
	out, took, err := m.Trial(ctx, h, input, cfg.MinThreshold, cfg.MaxThreshold)
	if errors.Is(err, wasm.ErrBusy) { // tests run one at a time, route calls on a few slots
		return nil, wire.Errorf(wire.CodeOverloaded, "policy test of %.12s found the node busy (%v): retry", m.Hash(), err)
	}
	if err != nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "policy test of %.12s: %v", m.Hash(), err)
	}
	return wire.PolicyTestResult{Hash: m.Hash(), Output: out, DurationUs: took.Microseconds()}, nil
}

func (n *Node) policyList() wire.PolicyList {
	var out wire.PolicyList
	for _, h := range wasm.Hooks {
		out.Policies = append(out.Policies, n.policyInfo(h))
	}
	return out
}

func (n *Node) policyInfo(h wasm.Hook) wire.PolicyInfo {
	for _, st := range n.policies.set.List() {
		if st.Hook != h {
			continue
		}
		info := wire.PolicyInfo{Hook: h.String(), Calls: st.Calls, Errors: st.Errors, Fallbacks: st.Fallbacks,
			P50Micros: st.P50.Microseconds(), P99Micros: st.P99.Microseconds(),
			SavedHash: st.Saved, SavedError: st.SavedError}
		if st.Active != nil {
			info.Hash, info.Size, info.ActivatedAtMs = st.Active.Hash, st.Active.Size, st.ActivatedAt.UnixMilli()
		}
		if st.LastGood != nil {
			info.LastGoodHash = st.LastGood.Hash
		}
		for _, ms := range st.Modules {
			info.Modules = append(info.Modules, wire.PolicyModuleInfo{Hash: ms.Hash, State: ms.State,
				Calls: ms.Calls, Errors: ms.Errors, Fallbacks: ms.Fallbacks, Deactivated: ms.Deactivated})
		}
		return info
	}
	return wire.PolicyInfo{Hook: h.String()}
}

// statusPolicies feeds the status page.
func (n *Node) statusPolicies() []PolicyStatus {
	var out []PolicyStatus
	for _, st := range n.policies.set.List() {
		if st.Active == nil {
			continue
		}
		out = append(out, PolicyStatus{Hook: st.Hook.String(), Hash: st.Active.Hash, Size: st.Active.Size,
			ActivatedAt: st.ActivatedAt, Calls: st.Calls, Errors: st.Errors, Fallbacks: st.Fallbacks,
			P50Micros: float64(st.P50.Microseconds()), P99Micros: float64(st.P99.Microseconds())})
	}
	return out
}

// watchPolicyDir loads the policy directory at start and again whenever
// its files change, until the node stops.
func (n *Node) watchPolicyDir() {
	n.loadPolicyDir()
	n.every(DefaultPolicyDirInterval, n.loadPolicyDir)
}

func (n *Node) loadPolicyDir() {
	p := n.policies
	p.dirMu.Lock()
	defer p.dirMu.Unlock()
	sig, err := dirSignature(n.cfg.PolicyDir)
	if err != nil {
		n.log.Warn("policy directory unreadable", "dir", n.cfg.PolicyDir, "err", err)
		return
	}
	if sig == p.dirSig {
		return
	}
	if err := p.set.LoadDir(context.Background(), n.cfg.PolicyDir); err != nil {
		n.log.Error("policy directory refused", "dir", n.cfg.PolicyDir, "err", err)
		return
	}
	p.dirSig = sig
}

// dirSignature summarizes a directory's files by name, size and
// modification time, to notice a ConfigMap update cheaply.
func dirSignature(dir string) (string, error) {
	var parts []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != dir && d.Name()[0] == '.' {
			return filepath.SkipDir // Kubernetes keeps old versions in ..data dirs
		}
		if info, err := os.Stat(path); err == nil && info.Mode().IsRegular() {
			parts = append(parts, fmt.Sprintf("%s:%d:%d", path, info.Size(), info.ModTime().UnixNano()))
		}
		return nil
	})
	slices.Sort(parts)
	return fmt.Sprint(parts), err
}

// policyCollector exports each hook's call statistics as metrics, per
// module (labels hook and module, the hash's first 12 hex digits): the
// counters of a module never go backwards while the node remembers it,
// across pushes, rollbacks and restores.
type policyCollector struct {
	n                                  *Node
	calls, errors, fallbacks, duration *prometheus.Desc
	active, guestOutput                *prometheus.Desc
}

func newPolicyCollector(n *Node) *policyCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &policyCollector{n: n,
		calls:       d("edgereg_policy_calls_total", "Calls of a policy module, by hook and module.", "hook", "module"),
		errors:      d("edgereg_policy_errors_total", "Policy calls the guest failed (trap, timeout, bad output), by hook and module.", "hook", "module"),
		fallbacks:   d("edgereg_policy_fallbacks_total", "Policy calls answered by the built-in behaviour, by hook and module.", "hook", "module"),
		duration:    d("edgereg_policy_call_duration_seconds", "Time of policy calls, by hook and module.", "hook", "module"),
		active:      d("edgereg_policy_active", "1 for the module active for a hook.", "hook", "module"),
		guestOutput: d("edgereg_policy_guest_output_bytes_total", "Bytes policy modules wrote to stdout and stderr (discarded)."),
	}
}

func (c *policyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.calls, c.errors, c.fallbacks, c.duration, c.active, c.guestOutput} {
		ch <- d
	}
}

func (c *policyCollector) Collect(ch chan<- prometheus.Metric) {
	if c.n.policies == nil {
		return
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.guestOutput, c.n.policies.host.GuestOutputBytes())
	for _, st := range c.n.policies.set.List() {
		h := st.Hook.String()
		for _, ms := range st.Modules {
			mod := ms.Hash[:12]
			counter(c.calls, ms.Calls, h, mod)
			counter(c.errors, ms.Errors, h, mod)
			counter(c.fallbacks, ms.Fallbacks, h, mod)
			buckets := make(map[float64]uint64, len(ms.Times.Upper))
			for i, u := range ms.Times.Upper {
				buckets[u.Seconds()] = ms.Times.Cumulative[i]
			}
			ch <- prometheus.MustNewConstHistogram(c.duration, ms.Times.Count, ms.Times.Sum.Seconds(), buckets, h, mod)
			active := 0.0
			if ms.State == "active" {
				active = 1
			}
			ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, active, h, mod)
		}
	}
}

// rateLimit allows at most max events in any window.
type rateLimit struct {
	mu     sync.Mutex
	max    int
	window time.Duration
	clock  interface{ Now() time.Time }
	events []time.Time
}

func newRateLimit(max int, window time.Duration, clock interface{ Now() time.Time }) *rateLimit {
	return &rateLimit{max: max, window: window, clock: clock}
}

func (r *rateLimit) allow() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	keep := r.events[:0]
	for _, t := range r.events {
		if now.Sub(t) < r.window {
			keep = append(keep, t)
		}
	}
	r.events = keep
	if len(r.events) >= r.max {
		return false
	}
	r.events = append(r.events, now)
	return true
}

// The registry's extension points the policy set implements (the wasm
// package speaks of wire.LeaseSnapshot, which registry.LeaseInfo is, and
// does not import the registry).
var (
	_ registry.Thresholds      = (*wasm.Set)(nil)
	_ registry.ExpiryConfirmer = (*wasm.Set)(nil)
)
