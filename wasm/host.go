package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/edgereg/edgereg/wire"
)

// Defaults of HostConfig.
const (
	DefaultMaxModuleSize  = 4 << 20 // 4 MiB
	DefaultMaxMemoryPages = 256     // 16 MiB of linear memory per instance
	// DefaultCallTimeout bounds one guest call. A Go guest answers in tens
	// of microseconds but may collect garbage on the way; 20 ms absorbs that
	// and a busy scheduler while still making a stuck guest cheap: route
	// reads are memoized and thresholds are computed off the heartbeat path,
	// so no request waits on this more than once per route version.
	DefaultCallTimeout = 20 * time.Millisecond
	// DefaultInitTimeout bounds instantiating a module, including a Go
	// guest's runtime start-up in _initialize.
	DefaultInitTimeout = 2 * time.Second
	DefaultPoolSize    = 4
	// DefaultMaxInstances is 4 instances for each of 3 hooks of 4 modules
	// (active, last good, one in validation, one in test).
	DefaultMaxInstances = 48
	DefaultMaxOutput    = 1 << 20 // 1 MiB
)

// HostConfig configures a Host. The zero value is usable.
type HostConfig struct {
	// CacheDir holds wazero's compilation cache, so a restarted node does
	// not compile its modules again. Empty means an in-memory cache.
	CacheDir string
	// MaxModuleSize caps a module's size in bytes; default 4 MiB.
	MaxModuleSize int
	// MaxMemoryPages caps each instance's linear memory in 64 KiB pages,
	// both what a module declares and what it may grow to; default 256
	// (16 MiB).
	MaxMemoryPages uint32
	// CallTimeout bounds every hook call; default 20 ms.
	CallTimeout time.Duration
	// InitTimeout bounds creating an instance; default 2 s.
	InitTimeout time.Duration
	// PoolSize bounds the live instances of each module for each hook,
	// and so the calls it runs at once; default 4.
	PoolSize int
	// MaxConcurrentRouteCalls bounds the route filter calls running at once
	// over all modules; with the expiry hooks (one call at a time each, off
	// the heartbeat path) it bounds the wazero call stacks alive at once,
	// which a recursing guest grows to about 150 MiB each; default
	// GOMAXPROCS, at least 2 and at most 8.
	MaxConcurrentRouteCalls int
	// MaxInstances bounds the live instances of all modules and hooks
	// together: the node-wide budget (ABI.md gives the memory it bounds);
	// default 48.
	MaxInstances int
	// MaxOutputSize caps a guest's output in bytes; default 1 MiB.
	MaxOutputSize int
	// Limits bounds a module's structure (functions, locals, body size,
	// nesting, br_table size, operand stack height, tables); checked on the
	// bytes before wazero decodes them. Zero fields get the defaults.
	Limits Limits
	// MinThreshold and MaxThreshold are the range of expiry thresholds a
	// policy may answer (outside it a call fails); default [10 s, 10 min].
	// The dry run checks answers against it; a Set uses it unless its own
	// config says otherwise.
	MinThreshold, MaxThreshold time.Duration
	// CompileMemory bounds, in bytes, what compiling one module may add to
	// the compile child's address space; default 1 GiB.
	CompileMemory int64
	// CompileTimeout bounds compiling one module; default 60 s.
	CompileTimeout time.Duration
	// MaxCompiledSize bounds, in bytes, the machine code a module compiles
	// to, which the node maps for as long as it keeps the module; default
	// 32 MiB.
	MaxCompiledSize int64
	// CompileInProcess compiles in the node's own process, without the
	// child's memory and time limits; for platforms where a process cannot
	// start itself. The structural limits still apply.
	CompileInProcess bool
	// MaxConcurrentCompiles bounds the modules compiled at once; default 2.
	MaxConcurrentCompiles int
	// GuestOutput receives what guests write to stdout and stderr, for
	// debugging policies; default: discarded.
	GuestOutput io.Writer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *HostConfig) setDefaults() {
	if c.MaxModuleSize <= 0 {
		c.MaxModuleSize = DefaultMaxModuleSize
	}
	if c.MaxMemoryPages == 0 {
		c.MaxMemoryPages = DefaultMaxMemoryPages
	}
	c.MaxMemoryPages = min(c.MaxMemoryPages, 65536)
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.InitTimeout <= 0 {
		c.InitTimeout = DefaultInitTimeout
	}
	if c.PoolSize <= 0 {
		c.PoolSize = DefaultPoolSize
	}
	if c.MaxConcurrentRouteCalls <= 0 {
		c.MaxConcurrentRouteCalls = min(max(2, runtime.GOMAXPROCS(0)), 8)
	}
	if c.MaxInstances <= 0 {
		c.MaxInstances = DefaultMaxInstances
	}
	if c.MaxOutputSize <= 0 {
		c.MaxOutputSize = DefaultMaxOutput
	}
	c.Limits.setDefaults()
	if c.MinThreshold <= 0 {
		c.MinThreshold = DefaultMinThreshold
	}
	if c.MaxThreshold <= 0 {
		c.MaxThreshold = DefaultMaxThreshold
	}
	c.MaxThreshold = max(c.MaxThreshold, c.MinThreshold)
	if c.CompileMemory <= 0 {
		c.CompileMemory = DefaultCompileMemory
	}
	if c.CompileTimeout <= 0 {
		c.CompileTimeout = DefaultCompileTimeout * raceSlowdown
	}
	if c.MaxCompiledSize <= 0 {
		c.MaxCompiledSize = DefaultMaxCompiledSize
	}
	if c.MaxConcurrentCompiles <= 0 {
		c.MaxConcurrentCompiles = 2
	}
	if c.GuestOutput == nil {
		c.GuestOutput = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Host compiles, validates and runs policy modules on one shared wazero
// Runtime. It is safe for concurrent use.
type Host struct {
	cfg      HostConfig
	log      *slog.Logger
	rt       wazero.Runtime
	cache    wazero.CompilationCache
	cacheDir string
	tempDir  bool // cacheDir is the host's own, removed at Close
	// wasi holds the host's WASI functions by name, for the signatures
	// imports must have.
	wasi map[string]api.FunctionDefinition
	// compiles bounds the modules compiled at once.
	compiles chan struct{}
	// budget holds a token per live instance, across every module.
	budget chan struct{}
	// routeCalls holds a token per route filter call in progress.
	routeCalls chan struct{}
	// trials holds a token per Trial in progress: with the expiry hooks
	// (one call at a time each), route calls and dry runs (one per compile
	// slot) it bounds the guest calls, and so the deep call stacks, alive
	// at once.
	trials chan struct{}
	// childPeak is the peak RSS of the last compile child, for tests.
	childPeak atomic.Int64
	// childRuns counts compile children started, for tests.
	childRuns atomic.Int64
	// out receives guests' stdout and stderr and counts the bytes.
	out *countingWriter

	mu      sync.Mutex
	modules map[string]*Module // by hash; each with its reference count
	// compiling holds the compilation in progress of each hash: wazero
	// keeps one compiled copy per module identity, so two compilations of
	// the same bytes must not race to close each other's, while different
	// modules compile side by side.
	compiling map[string]*compileCall
	// refused remembers the modules refused before their dry run, by
	// hash, oldest first in refusedOrder (at most maxRefused): such a
	// refusal depends on the bytes alone, and the node's policy directory
	// is loaded again every few seconds while a file in it is refused.
	refused      map[string]error
	refusedOrder []string
	closed       bool
}

// maxRefused bounds the refusals a Host remembers.
const maxRefused = 256

// compileCall is one compilation in progress; done is closed when err is
// set (nil on success, when the module is in Host.modules).
type compileCall struct {
	done chan struct{}
	err  error
}

// NewHost starts a Host: a wazero Runtime that closes instances whose call
// context is done, caps memory, and provides the WASI functions of the
// import allow-list.
func NewHost(ctx context.Context, cfg HostConfig) (*Host, error) {
	cfg.setDefaults()
	dir, temp := cfg.CacheDir, false
	if dir == "" {
		// The compile child hands its work over through a cache directory,
		// so a host without one gets a private one.
		d, err := os.MkdirTemp("", "edgereg-wasm-cache")
		if err != nil {
			return nil, fmt.Errorf("wasm host: compilation cache: %w", err)
		}
		dir, temp = d, true
	}
	cache, err := newCache(dir)
	if err != nil {
		return nil, err
	}
	removeChildCaches(dir, 2*cfg.CompileTimeout)
	rt := wazero.NewRuntimeWithConfig(ctx, runtimeConfig(cfg.MaxMemoryPages, cache))
	// Guests may link only to the allow-listed functions (checkImports);
	// with no preopened directory, empty args and environment, fake clocks
	// and discarded stdio, none of them reaches anything outside the guest.
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		_ = cache.Close(ctx)
		return nil, fmt.Errorf("wasm host: instantiate WASI: %w", err)
	}
	return &Host{cfg: cfg, log: cfg.Logger, out: &countingWriter{w: cfg.GuestOutput}, rt: rt, cache: cache, cacheDir: dir, tempDir: temp,
		wasi:     rt.Module(wasiModule).ExportedFunctionDefinitions(),
		compiles: make(chan struct{}, cfg.MaxConcurrentCompiles), budget: make(chan struct{}, cfg.MaxInstances),
		routeCalls: make(chan struct{}, cfg.MaxConcurrentRouteCalls), trials: make(chan struct{}, 1),
		modules: make(map[string]*Module), compiling: make(map[string]*compileCall), refused: make(map[string]error)}, nil
}

func newCache(dir string) (wazero.CompilationCache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("wasm host: compilation cache: %w", err)
	}
	cache, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return nil, fmt.Errorf("wasm host: compilation cache in %s: %w", dir, err)
	}
	return cache, nil
}

// GuestOutputBytes counts the bytes guests wrote to stdout and stderr,
// which go to HostConfig.GuestOutput (discarded by default).
func (h *Host) GuestOutputBytes() uint64 { return h.out.n.Load() }

// countingWriter counts what passes through it.
type countingWriter struct {
	w io.Writer
	n atomic.Uint64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n.Add(uint64(len(p)))
	return c.w.Write(p)
}

// Config returns the host's configuration with defaults filled in.
func (h *Host) Config() HostConfig { return h.cfg }

// Close closes every module, instance and the runtime. Modules still
// referenced become unusable: their calls fail with ErrClosed.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	mods := h.modules
	h.modules = nil
	h.mu.Unlock()
	for _, m := range mods {
		m.closePools()
	}
	err := errors.Join(h.rt.Close(ctx), h.cache.Close(ctx))
	if h.tempDir {
		_ = os.RemoveAll(h.cacheDir)
	}
	return err
}

// Load reads a module from a file and validates it.
func (h *Host) Load(ctx context.Context, path string) (*Module, error) {
	b, err := readCapped(path, h.cfg.MaxModuleSize)
	if err != nil {
		return nil, err
	}
	return h.Validate(ctx, b)
}

// ReadModuleFile reads a module from a file as Host.Load does, for tools
// that send it elsewhere (`edgereg policy push`): only a regular file of
// at most the default module cap, 4 MiB, without reading more of it.
func ReadModuleFile(path string) ([]byte, error) { return readCapped(path, DefaultMaxModuleSize) }

// ReadInputFile reads a hook input for `edgereg policy test` from a
// regular file of at most wire.MaxFrameLen bytes, the most a frame holds.
func ReadInputFile(path string) ([]byte, error) {
	b, err := readRegular(path, wire.MaxFrameLen)
	if err != nil {
		return nil, fmt.Errorf("policy input: %w", err)
	}
	return b, nil
}

// readCapped reads a module file, refusing one larger than max without
// reading all of it (a *ValidationError, ErrModuleTooLarge).
func readCapped(path string, max int) ([]byte, error) {
	b, err := readRegular(path, max)
	var big *tooLarge
	if errors.As(err, &big) {
		return nil, refuse("", ErrModuleTooLarge, "%s is over %d bytes", path, max)
	}
	if err != nil {
		return nil, fmt.Errorf("load policy module: %w", err)
	}
	return b, nil
}

// tooLarge is readRegular's error for a file over its cap.
type tooLarge struct{ path string }

func (e *tooLarge) Error() string { return e.path + " is over the size cap" }

// readRegular reads a regular file of at most max bytes. Anything else is
// refused before it is opened: opening a FIFO blocks until a writer
// comes, and a device may never end.
func readRegular(path string, max int) ([]byte, error) {
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%v)", path, fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > max {
		return nil, &tooLarge{path}
	}
	return b, nil
}

// Validate checks a module and compiles it, or returns the module already
// loaded with the same SHA-256. The caller owns one reference to the result
// and must Close it; a Set that activates the module keeps its own.
//
// A module is refused, with a *ValidationError, if it is over the size cap,
// is not WebAssembly, imports anything outside the allow-list (ABI.md),
// lacks an export of the ABI or has one with the wrong signature, reports
// an ABI version other than 1, declares memory over the cap, implements no
// hook, or fails a dry run of any hook it implements on sample inputs.
func (h *Host) Validate(ctx context.Context, module []byte) (*Module, error) {
	if len(module) > h.cfg.MaxModuleSize {
		return nil, refuse("", ErrModuleTooLarge, "%d bytes, cap is %d", len(module), h.cfg.MaxModuleSize)
	}
	sum := sha256.Sum256(module)
	hash := hex.EncodeToString(sum[:])
	for {
		m, call, err := h.lookup(hash)
		if m != nil || err != nil {
			return m, err
		}
		if call == nil { // this caller compiles
			return h.validateNew(ctx, hash, module)
		}
		select {
		case <-call.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("validate policy module %.12s: %w", hash, ctx.Err())
		}
		// A refusal is the same for the same bytes; a compilation that
		// its own caller gave up on is tried again.
		if call.err != nil && !isContextError(call.err) {
			return nil, call.err
		}
	}
}

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// validateNew compiles and dry-runs a module no one else is compiling.
func (h *Host) validateNew(ctx context.Context, hash string, module []byte) (m *Module, err error) {
	defer func() { h.finishCompile(hash, m, err) }()
	select {
	case h.compiles <- struct{}{}:
		defer func() { <-h.compiles }()
	case <-ctx.Done():
		return nil, fmt.Errorf("validate policy module %.12s: waiting for other compilations: %w", hash, ctx.Err())
	}
	m, err = h.compile(ctx, hash, module)
	if err != nil {
		h.remember(hash, err)
		return nil, err
	}
	if err := m.dryRun(ctx); err != nil {
		m.destroy(ctx)
		return nil, err
	}
	return m, nil
}

// remember keeps a refusal of compile (structure, compilation limits,
// imports, exports, memory), which the same bytes always get, so they are
// refused again without compiling. Failures that may pass next time (the
// caller's deadline, a child that could not start) are not refusals; dry
// runs, whose calls have real deadlines, are not remembered either.
func (h *Host) remember(hash string, err error) {
	var ve *ValidationError
	if !errors.As(err, &ve) || isContextError(err) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.refused[hash]; ok {
		return
	}
	if len(h.refusedOrder) >= maxRefused {
		delete(h.refused, h.refusedOrder[0])
		h.refusedOrder = h.refusedOrder[1:]
	}
	h.refused[hash] = err
	h.refusedOrder = append(h.refusedOrder, hash)
}

// finishCompile publishes a compilation's result to those waiting for it.
func (h *Host) finishCompile(hash string, m *Module, err error) {
	h.mu.Lock()
	call := h.compiling[hash]
	delete(h.compiling, hash)
	if err == nil && h.closed {
		err = fmt.Errorf("validate policy module: host %w", ErrClosed)
		defer m.destroy(context.Background())
	}
	if err == nil {
		m.refs = 1
		h.modules[hash] = m
	}
	call.err = err
	h.mu.Unlock()
	close(call.done)
}

// lookup returns the loaded module with the hash, with a new reference;
// or the compilation of it in progress; or neither, and then registers
// the caller's compilation.
func (h *Host) lookup(hash string) (*Module, *compileCall, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, fmt.Errorf("validate policy module: host %w", ErrClosed)
	}
	if m := h.modules[hash]; m != nil {
		m.refs++
		return m, nil, nil
	}
	if err := h.refused[hash]; err != nil {
		return nil, nil, err
	}
	if call := h.compiling[hash]; call != nil {
		return nil, call, nil
	}
	h.compiling[hash] = &compileCall{done: make(chan struct{})}
	return nil, nil, nil
}

// compile checks what can be checked without running the module.
func (h *Host) compile(ctx context.Context, hash string, module []byte) (*Module, error) {
	if _, ve := checkStructure(module, h.cfg.Limits); ve != nil {
		ve.Hash = hash
		return nil, ve
	}
	if ve := checkMemorySection(module, h.cfg.MaxMemoryPages); ve != nil {
		ve.Hash = hash
		return nil, ve
	}
	code := withoutCustomSections(module)
	if err := h.compileIsolated(ctx, hash, code); err != nil {
		return nil, err
	}
	cm, err := h.rt.CompileModule(ctx, code)
	if err != nil && isCacheDamage(err) {
		// The cache entry, not the module, is at fault (cut short by a
		// disk fault or an interrupted copy of the data directory):
		// compile again, replacing the entry, rather than refuse.
		h.log.Warn("policy module's compiled code in the cache is damaged: compiling it again", "hash", hash, "err", err)
		if err := h.recompile(ctx, hash, code); err != nil {
			return nil, err
		}
		cm, err = h.rt.CompileModule(ctx, code)
	}
	if err != nil {
		if isFileError(err) || isCacheDamage(err) { // the cache, not the module: not a refusal
			return nil, fmt.Errorf("compile policy module %.12s: %w", hash, err)
		}
		return nil, refuse(hash, ErrMalformed, "%v", err)
	}
	hooks, hasInit, ve := checkModule(cm, h.wasi, h.cfg.MaxMemoryPages)
	if ve != nil {
		_ = cm.Close(ctx)
		ve.Hash = hash
		return nil, ve
	}
	m := &Module{
		host:     h,
		hash:     hash,
		bytes:    module,
		compiled: cm,
		hooks:    hooks,
		hasInit:  hasInit,
	}
	for _, hk := range Hooks {
		if hooks.has(hk) {
			m.pools[hk] = newPool(h.cfg.PoolSize, h.budget, m.newInstance)
		}
	}
	return m, nil
}

// release drops one reference to m and destroys it at zero.
func (h *Host) release(ctx context.Context, m *Module) {
	h.mu.Lock()
	m.refs--
	last := m.refs == 0
	if last && h.modules[m.hash] == m {
		delete(h.modules, m.hash)
	}
	h.mu.Unlock()
	if last {
		m.destroy(ctx)
	}
}

func (h *Host) retain(m *Module) {
	h.mu.Lock()
	m.refs++
	h.mu.Unlock()
}
