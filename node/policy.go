package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgereg/edgereg/wasm"
	"github.com/edgereg/edgereg/wire"
)

// Policy defaults.
const (
	DefaultMaxPolicyUploadsPerMinute = 10
	DefaultPolicyDirInterval         = 10 * time.Second
)

// policies binds the WebAssembly policy host to the node: the Set filters
// routes and decides thresholds and expiries; operators change it over
// QUIC; a policy directory (a Kubernetes ConfigMap) feeds it too.
type policies struct {
	host    *wasm.Host
	set     *wasm.Set
	uploads *rateLimit
	dirMu   sync.Mutex
	dirSig  string // what the policy directory held when last loaded
}

func newPolicies(cfg Config) (*policies, error) {
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
	set, err := wasm.NewSet(ctx, host, wasm.SetConfig{
		DefaultThreshold:  cfg.ExpiryThreshold,
		HeartbeatInterval: cfg.HeartbeatInterval,
		Store:             store,
		Now:               cfg.Clock.Now,
		Logger:            cfg.Logger,
	})
	if err != nil {
		host.Close(ctx)
		return nil, fmt.Errorf("restore policies: %w", err)
	}
	p := &policies{host: host, set: set, uploads: newRateLimit(cfg.MaxPolicyUploadsPerMinute, time.Minute, cfg.Clock)}
	for _, st := range set.List() {
		if st.Active != nil {
			cfg.Logger.Info("policy restored", "hook", st.Hook.String(), "hash", st.Active.Hash, "size", st.Active.Size)
		}
	}
	return p, nil
}

func (p *policies) close() {
	p.set.Close()
	p.host.Close(context.Background())
}

// filter returns the route a client may see, by the active route policy.
func (p *policies) filter(addr string, attrs wire.ClientAttrs, topic string, version uint64, body []byte) ([]byte, uint64) {
	out, v, _ := p.set.RouteFilter(context.Background(), addr, attrs, topic, version, body)
	return out, v
}

func (n *Node) dispatchPolicy(f *wire.Frame) (any, error) {
	switch f.Type {
	case wire.TypePolicyPush:
		return decodeRun(f, n.policyPush)
	case wire.TypePolicyList:
		return n.policyList(), nil
	case wire.TypePolicyRollback, wire.TypePolicyRemove:
		return decodeRun(f, func(h *wire.PolicyHook) (any, error) { return n.policyChange(f.Type, h.Hook) })
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

// validate checks an uploaded module, within the upload rate limit.
func (n *Node) validateModule(hookName string, module []byte) (wasm.Hook, *wasm.Module, error) {
	h, err := parseHook(hookName)
	if err != nil {
		return 0, nil, err
	}
	if !n.policies.uploads.allow() {
		return 0, nil, wire.Errorf(wire.CodeOverloaded, "more than %d policy uploads in a minute: wait and retry", n.cfg.MaxPolicyUploadsPerMinute)
	}
	m, err := n.policies.host.Validate(context.Background(), module)
	if err != nil {
		return 0, nil, wire.Errorf(wire.CodeBadRequest, "policy module refused: %v", err)
	}
	if !m.Implements(h) {
		m.Close()
		return 0, nil, wire.Errorf(wire.CodeBadRequest, "policy module %.12s does not implement the %s hook (it has %v)", m.Hash(), h, m.Hooks())
	}
	return h, m, nil
}

func (n *Node) policyPush(req *wire.PolicyPush) (any, error) {
	h, m, err := n.validateModule(req.Hook, req.Module)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if err := n.policies.set.Activate(h, m); err != nil {
		return nil, fmt.Errorf("activate policy: %w", err)
	}
	n.log.Info("policy activated", "hook", h.String(), "hash", m.Hash(), "size", m.Size(), "source", "upload")
	return n.policyInfo(h), nil
}

func (n *Node) policyChange(t wire.Type, hookName string) (any, error) {
	h, err := parseHook(hookName)
	if err != nil {
		return nil, err
	}
	if t == wire.TypePolicyRollback {
		err = n.policies.set.Rollback(h)
	} else {
		err = n.policies.set.Remove(h)
	}
	if errors.Is(err, wasm.ErrNoLastGood) {
		return nil, wire.Errorf(wire.CodeNotFound, "the %s hook has no earlier policy to roll back to", h)
	}
	if err != nil {
		return nil, err
	}
	info := n.policyInfo(h)
	action := map[wire.Type]string{wire.TypePolicyRollback: "policy rolled back", wire.TypePolicyRemove: "policy removed"}[t]
	n.log.Info(action, "hook", h.String(), "active", info.Hash, "by", "operator")
	return info, nil
}

func (n *Node) policyTest(req *wire.PolicyTest) (any, error) {
	h, m, err := n.validateModule(req.Hook, req.Module)
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
	out, took, err := m.Trial(context.Background(), h, input, 10*time.Second, 10*time.Minute)
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
		info := wire.PolicyInfo{Hook: hookName(h), Calls: st.Calls, Errors: st.Errors, Fallbacks: st.Fallbacks,
			P50Micros: st.P50.Microseconds(), P99Micros: st.P99.Microseconds()}
		if st.Active != nil {
			info.Hash, info.Size, info.ActivatedAtMs = st.Active.Hash, st.Active.Size, st.ActivatedAt.UnixMilli()
		}
		if st.LastGood != nil {
			info.LastGoodHash = st.LastGood.Hash
		}
		return info
	}
	return wire.PolicyInfo{Hook: hookName(h)}
}

// hookName spells a hook as the protocol and CLI do.
func hookName(h wasm.Hook) string {
	switch h {
	case wasm.HookRouteFilter:
		return "route"
	case wasm.HookExpiryThreshold:
		return "expiry"
	case wasm.HookExpiryConfirm:
		return "confirm"
	}
	return h.String()
}

// statusPolicies feeds the status page.
func (n *Node) statusPolicies() []PolicyStatus {
	var out []PolicyStatus
	for _, st := range n.policies.set.List() {
		if st.Active == nil {
			continue
		}
		out = append(out, PolicyStatus{Hook: hookName(st.Hook), Hash: st.Active.Hash, Size: st.Active.Size,
			ActivatedAt: st.ActivatedAt, Calls: st.Calls, Errors: st.Errors,
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
	for _, st := range p.set.List() {
		if st.Active != nil {
			n.log.Info("policy active", "hook", st.Hook.String(), "hash", st.Active.Hash, "source", n.cfg.PolicyDir)
		}
	}
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

// policyCollector exports each hook's call statistics as metrics.
type policyCollector struct {
	n                                  *Node
	calls, errors, fallbacks, p50, p99 *prometheus.Desc
}

func newPolicyCollector(n *Node) *policyCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"hook"}, nil)
	}
	return &policyCollector{n: n,
		calls:     d("edgereg_policy_calls_total", "Calls of the active policy module, by hook."),
		errors:    d("edgereg_policy_errors_total", "Policy calls the guest failed, by hook."),
		fallbacks: d("edgereg_policy_fallbacks_total", "Policy calls answered by the built-in behaviour, by hook."),
		p50:       d("edgereg_policy_call_p50_seconds", "Median policy call time, by hook."),
		p99:       d("edgereg_policy_call_p99_seconds", "99th percentile policy call time, by hook."),
	}
}

func (c *policyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.calls, c.errors, c.fallbacks, c.p50, c.p99} {
		ch <- d
	}
}

func (c *policyCollector) Collect(ch chan<- prometheus.Metric) {
	if c.n.policies == nil {
		return
	}
	for _, st := range c.n.policies.set.List() {
		h := hookName(st.Hook)
		ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(st.Calls), h)
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(st.Errors), h)
		ch <- prometheus.MustNewConstMetric(c.fallbacks, prometheus.CounterValue, float64(st.Fallbacks), h)
		ch <- prometheus.MustNewConstMetric(c.p50, prometheus.GaugeValue, st.P50.Seconds(), h)
		ch <- prometheus.MustNewConstMetric(c.p99, prometheus.GaugeValue, st.P99.Seconds(), h)
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
