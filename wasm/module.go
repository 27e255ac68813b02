package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// Module is a validated, compiled policy module with its instance pool.
// Modules are shared by hash and reference counted: every Host.Validate
// or Host.Load result must be Closed once.
type Module struct {
	host     *Host
	hash     string
	bytes    []byte
	compiled wazero.CompiledModule
	hooks    hookSet
	hasInit  bool
	pools    [numHooks]*pool // per hook, so one hook's load never starves another's
	refs     int             // guarded by host.mu
}

// Hash returns the module's identity: the SHA-256 of its bytes in hex.
func (m *Module) Hash() string { return m.hash }

// Size returns the module's size in bytes.
func (m *Module) Size() int { return len(m.bytes) }

// Bytes returns the module's bytes. Do not modify them.
func (m *Module) Bytes() []byte { return m.bytes }

// Implements reports whether the module implements the hook.
func (m *Module) Implements(h Hook) bool { return m.hooks.has(h) }

// Hooks returns the hooks the module implements, in ABI order.
func (m *Module) Hooks() []Hook {
	var out []Hook
	for _, h := range Hooks {
		if m.hooks.has(h) {
			out = append(out, h)
		}
	}
	return out
}

// Close drops the caller's reference; the last one closes the module's
// instances and compiled code.
func (m *Module) Close() error {
	m.host.release(context.Background(), m)
	return nil
}

func (m *Module) destroy(ctx context.Context) {
	m.closePools()
	_ = m.compiled.Close(ctx)
}

func (m *Module) closePools() {
	for _, p := range m.pools {
		if p != nil {
			p.close()
		}
	}
}

// instance is one instantiation of a module with its exports resolved.
type instance struct {
	mod   api.Module
	mem   api.Memory
	alloc api.Function
	free  api.Function
	hooks [numHooks]api.Function
	stack [2]uint64
}

// newInstance instantiates the module and runs _initialize, off the call
// path (a pool's filler, or the dry run), under its own deadline: a Go
// guest's runtime start-up takes longer than a call may. Canceling ctx
// (a pool closing) ends it.
func (m *Module) newInstance(ctx context.Context) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, m.host.cfg.InitTimeout)
	defer cancel()
	out := m.host.out
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions().WithStdout(out).WithStderr(out)
	mod, err := m.host.rt.InstantiateModule(ctx, m.compiled, cfg)
	if err != nil {
		return nil, fmt.Errorf("instantiate policy module %.12s: %w", m.hash, callError(err))
	}
	if m.hasInit {
		if _, err := mod.ExportedFunction(exportInitialize).Call(ctx); err != nil {
			_ = mod.Close(context.Background())
			return nil, fmt.Errorf("initialize policy module %.12s: %w", m.hash, callError(err))
		}
	}
	in := &instance{
		mod:   mod,
		mem:   mod.ExportedMemory(exportMemory),
		alloc: mod.ExportedFunction(exportAlloc),
		free:  mod.ExportedFunction(exportFree),
	}
	for _, h := range Hooks {
		if m.hooks.has(h) {
			in.hooks[h] = mod.ExportedFunction(h.Export())
		}
	}
	return in, nil
}

func (in *instance) close() { _ = in.mod.Close(context.Background()) }

// call runs one hook: the input is copied into guest memory through
// edgereg_alloc, the hook returns (ptr<<32 | len) of its output, and both
// buffers are handed back with edgereg_free.
func (in *instance) call(ctx context.Context, h Hook, input []byte, maxOut int) ([]byte, error) {
	fn := in.hooks[h]
	if fn == nil {
		return nil, ErrHookAbsent
	}
	ptr, err := in.allocate(ctx, len(input))
	if err != nil {
		return nil, err
	}
	in.mem.Write(ptr, input) // allocate checked the bounds
	in.stack[0], in.stack[1] = uint64(ptr), uint64(len(input))
	if err := fn.CallWithStack(ctx, in.stack[:]); err != nil {
		return nil, callError(err)
	}
	res := int64(in.stack[0])
	outPtr, outLen := uint32(uint64(res)>>32), uint32(res)
	if res < 0 || outLen == 0 {
		return nil, fmt.Errorf("%w: %s returned %#x", ErrGuest, h.Export(), res)
	}
	if int(outLen) > maxOut {
		return nil, fmt.Errorf("%w: %d bytes, cap is %d (%s)", ErrBadOutput, outLen, maxOut, outputCapReason(h))
	}
	view, ok := in.mem.Read(outPtr, outLen)
	if !ok {
		return nil, fmt.Errorf("%w: output [%d,+%d) is outside memory", ErrBadOutput, outPtr, outLen)
	}
	out := bytes.Clone(view)
	if err := in.release(ctx, outPtr, outLen); err != nil {
		return nil, err
	}
	if err := in.release(ctx, ptr, uint32(len(input))); err != nil {
		return nil, err
	}
	in.renew(h)
	return out, nil
}

// renew drops the call engines of the functions a call used, and with them
// any call stack the call grew: wazero keeps a grown stack (up to about
// 100 MB) with the function value, so without this every idle pooled
// instance would hold the deepest stack it ever needed (measured: 4
// instances of a module recursing 2,000,000 calls deep kept +181 MiB).
// Resolving an export again costs a 10 KB initial stack each.
func (in *instance) renew(h Hook) {
	in.alloc = in.mod.ExportedFunction(exportAlloc)
	in.free = in.mod.ExportedFunction(exportFree)
	in.hooks[h] = in.mod.ExportedFunction(h.Export())
}

func (in *instance) allocate(ctx context.Context, n int) (uint32, error) {
	in.stack[0] = uint64(n)
	if err := in.alloc.CallWithStack(ctx, in.stack[:]); err != nil {
		return 0, callError(err)
	}
	ptr := uint32(in.stack[0])
	if ptr == 0 && n > 0 {
		return 0, fmt.Errorf("%w: %s(%d) returned 0", ErrGuest, exportAlloc, n)
	}
	if uint64(ptr)+uint64(n) > uint64(in.mem.Size()) {
		return 0, fmt.Errorf("%w: %s(%d) returned %#x, outside memory", ErrBadOutput, exportAlloc, n, ptr)
	}
	return ptr, nil
}

func (in *instance) release(ctx context.Context, ptr, n uint32) error {
	in.stack[0], in.stack[1] = uint64(ptr), uint64(n)
	if err := in.free.CallWithStack(ctx, in.stack[:]); err != nil {
		return callError(err)
	}
	return nil
}

// callError turns a wazero call error into ErrTimeout or ErrTrap with the
// first line of its message (the rest is a guest stack trace).
func callError(err error) error {
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return fmt.Errorf("%w (the instance was closed)", ErrTimeout)
		case sys.ExitCodeContextCanceled:
			return fmt.Errorf("%w: canceled (the instance was closed)", ErrTimeout)
		}
		return fmt.Errorf("%w: guest exited with code %d", ErrTrap, exit.ExitCode())
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	if strings.HasSuffix(msg, "stack overflow") { // wazero's wasmruntime.ErrRuntimeStackOverflow
		return ErrStackOverflow
	}
	return fmt.Errorf("%w: %s", ErrTrap, msg)
}

// testHookInvokeInput, when set, replaces the input of each hook call:
// tests use it to make one call miss its deadline (an input a guest loops
// on), as a loaded node makes a call do, which no module can do on cue.
var testHookInvokeInput func(h Hook, input []byte) []byte

// invoke runs one hook call on a pooled instance under the call deadline
// and hands the output to check. The instance goes back to the pool only
// if the call succeeded and check accepted its output: a guest that
// answered nonsense may have corrupted its own state.
func (m *Module) invoke(ctx context.Context, h Hook, input []byte, maxOut int, check func([]byte) error) (time.Duration, error) {
	if !m.hooks.has(h) {
		return 0, fmt.Errorf("policy module %.12s: %w: %s", m.hash, ErrHookAbsent, h)
	}
	ctx, cancel := context.WithTimeout(ctx, m.host.cfg.CallTimeout)
	defer cancel()
	if h == HookRouteFilter {
		select {
		case m.host.routeCalls <- struct{}{}:
			defer func() { <-m.host.routeCalls }()
		case <-ctx.Done():
			return 0, fmt.Errorf("policy module %.12s %s: %w: %w", m.hash, h, ErrBusy, ctx.Err())
		}
	}
	if testHookInvokeInput != nil {
		input = testHookInvokeInput(h, input)
	}
	pl := m.pools[h]
	in, err := pl.get(ctx)
	if err != nil {
		return 0, fmt.Errorf("policy module %.12s %s: %w", m.hash, h, err)
	}
	start := time.Now()
	out, err := in.call(ctx, h, input, min(maxOut, m.host.cfg.MaxOutputSize))
	took := time.Since(start)
	if err == nil {
		err = check(out)
	}
	pl.put(in, err == nil)
	if err != nil {
		return took, fmt.Errorf("policy module %.12s %s: %w", m.hash, h, err)
	}
	return took, nil
}
