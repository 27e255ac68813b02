package wasm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// wasiModule is the only module guests may import from.
const wasiModule = "wasi_snapshot_preview1"

// allowedImports is the import allow-list: exactly what a standard Go
// module built with GOOS=wasip1 -buildmode=c-shared imports when it uses
// the runtime plus fmt/os (found by building one and listing its imports),
// which also covers what TinyGo, Rust and C wasip1 guests import for the
// same. Every one of them is harmless here because the host gives guests
// no preopened directory (so no path can be opened), empty arguments and
// environment, wazero's fake clocks, and stdio that goes to a discard
// sink. Everything else — path_*, fd_read, fd_seek, fd_readdir, sock_*,
// proc_raise — is refused at validation.
var allowedImports = map[string]string{
	"args_get":            "runtime start-up: empty",
	"args_sizes_get":      "runtime start-up: empty",
	"environ_get":         "runtime start-up: empty",
	"environ_sizes_get":   "runtime start-up: empty",
	"clock_time_get":      "runtime timers: a fake clock; real time comes in the input",
	"poll_oneoff":         "runtime idle/sleep: no real sleeping",
	"sched_yield":         "runtime scheduler",
	"random_get":          "runtime hash seeds; policy randomness comes in the input",
	"proc_exit":           "exit: ends the call with an error, the instance is discarded",
	"fd_write":            "stdout/stderr only: there is no other descriptor",
	"fd_close":            "os start-up on stdio descriptors",
	"fd_fdstat_get":       "os start-up on stdio descriptors",
	"fd_fdstat_set_flags": "os start-up on stdio descriptors",
	"fd_prestat_get":      "os start-up: finds no preopened directory",
	"fd_prestat_dir_name": "os start-up: finds no preopened directory",
}

// AllowedImports returns the names of the wasi_snapshot_preview1 functions
// a module may import, sorted.
func AllowedImports() []string {
	names := make([]string, 0, len(allowedImports))
	for n := range allowedImports {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

type signature struct{ params, results []api.ValueType }

var (
	sigVersion = signature{nil, []api.ValueType{i32}}
	sigAlloc   = signature{[]api.ValueType{i32}, []api.ValueType{i32}}
	sigFree    = signature{[]api.ValueType{i32, i32}, nil}
	sigHook    = signature{[]api.ValueType{i32, i32}, []api.ValueType{i64}}
	sigInit    = signature{nil, nil}
)

// checkModule checks a compiled module's imports (against wasi, the
// host's WASI functions), exports and memory, and returns the hooks it
// exports and whether it exports _initialize.
func checkModule(cm wazero.CompiledModule, wasi map[string]api.FunctionDefinition, maxPages uint32) (hookSet, bool, *ValidationError) {
	if ve := checkImports(cm, wasi); ve != nil {
		return 0, false, ve
	}
	exports := cm.ExportedFunctions()
	required := []struct {
		name string
		sig  signature
	}{{exportABIVersion, sigVersion}, {exportAlloc, sigAlloc}, {exportFree, sigFree}}
	for _, r := range required {
		if ve := checkExport(exports, r.name, r.sig, true); ve != nil {
			return 0, false, ve
		}
	}
	var hooks hookSet
	for _, hk := range Hooks {
		if ve := checkExport(exports, hk.Export(), sigHook, false); ve != nil {
			return 0, false, ve
		}
		if _, ok := exports[hk.Export()]; ok {
			hooks = hooks.with(hk)
		}
	}
	for _, opt := range []struct {
		name string
		sig  signature
	}{{exportHooks, sigVersion}, {exportInitialize, sigInit}} {
		if ve := checkExport(exports, opt.name, opt.sig, false); ve != nil {
			return 0, false, ve
		}
	}
	if hooks == 0 {
		return 0, false, refuse("", ErrNoHooks, "exports none of %s, %s, %s",
			HookRouteFilter.Export(), HookExpiryThreshold.Export(), HookExpiryConfirm.Export())
	}
	if ve := checkMemory(cm, maxPages); ve != nil {
		return 0, false, ve
	}
	_, hasInit := exports[exportInitialize]
	return hooks, hasInit, nil
}

// checkImports refuses imports outside the allow-list, and allowed
// functions imported with another signature than the host's: before,
// such a module compiled and was refused at its dry run's instantiation
// as "policy call trapped: ... signature mismatch", and, a dry-run
// refusal, was not remembered (TestHostileModulesSweep,
// import-allowed-wrong-sig).
func checkImports(cm wazero.CompiledModule, wasi map[string]api.FunctionDefinition) *ValidationError {
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod != wasiModule {
			return refuse("", ErrForbiddenImport, "imports %s.%s: only %s is provided", mod, name, wasiModule)
		}
		if _, ok := allowedImports[name]; !ok {
			return refuse("", ErrForbiddenImport, "imports %s.%s, which is not on the allow-list", mod, name)
		}
		if def, ok := wasi[name]; ok && (!slices.Equal(f.ParamTypes(), def.ParamTypes()) || !slices.Equal(f.ResultTypes(), def.ResultTypes())) {
			return refuse("", ErrForbiddenImport, "imports %s.%s with signature %s, the host's is %s", mod, name,
				sigString(f.ParamTypes(), f.ResultTypes()), sigString(def.ParamTypes(), def.ResultTypes()))
		}
	}
	if mems := cm.ImportedMemories(); len(mems) > 0 {
		mod, name, _ := mems[0].Import()
		return refuse("", ErrForbiddenImport, "imports memory %s.%s: a module must define its own", mod, name)
	}
	return nil
}

func checkExport(exports map[string]api.FunctionDefinition, name string, want signature, required bool) *ValidationError {
	f, ok := exports[name]
	if !ok {
		if required {
			return refuse("", ErrExport, "missing export %s", name)
		}
		return nil
	}
	if !slices.Equal(f.ParamTypes(), want.params) || !slices.Equal(f.ResultTypes(), want.results) {
		return refuse("", ErrExport, "export %s has signature %s, want %s",
			name, sigString(f.ParamTypes(), f.ResultTypes()), sigString(want.params, want.results))
	}
	return nil
}

func sigString(params, results []api.ValueType) string {
	name := func(ts []api.ValueType) string {
		s := "("
		for i, t := range ts {
			if i > 0 {
				s += ","
			}
			s += api.ValueTypeName(t)
		}
		return s + ")"
	}
	return name(params) + "->" + name(results)
}

func checkMemory(cm wazero.CompiledModule, maxPages uint32) *ValidationError {
	mem, ok := cm.ExportedMemories()[exportMemory]
	if !ok {
		return refuse("", ErrExport, "missing export %s", exportMemory)
	}
	if mem.Min() > maxPages {
		return refuse("", ErrMemory, "declares %d pages minimum, cap is %d", mem.Min(), maxPages)
	}
	return nil
}

// checkMemorySection reads the declared memory limits straight from the
// binary, before compiling: wazero refuses a declared maximum over its
// limit with a generic compile error, and operators deserve to be told
// which rule a module broke.
func checkMemorySection(b []byte, maxPages uint32) *ValidationError {
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return refuse("", ErrMalformed, "no WebAssembly magic number")
	}
	if v := binary.LittleEndian.Uint32(b[4:8]); v != 1 {
		return refuse("", ErrMalformed, "binary format version %d, want 1", v)
	}
	r := &leb{b: b, i: 8}
	for r.i < len(b) && r.err == nil {
		id := r.byte()
		size := r.u32()
		end := r.i + int(size)
		if r.err != nil || end > len(b) || end < r.i {
			return refuse("", ErrMalformed, "section %d overruns the module", id)
		}
		if id == 5 { // memory section
			return checkMemoryLimits(&leb{b: b[:end], i: r.i}, maxPages)
		}
		r.i = end
	}
	if r.err != nil {
		return refuse("", ErrMalformed, "%v", r.err)
	}
	return nil
}

func checkMemoryLimits(r *leb, maxPages uint32) *ValidationError {
	n := r.u32()
	for range n {
		flags := r.byte()
		if flags&^1 != 0 {
			return refuse("", ErrMemory, "shared or 64-bit memory (flags %#x) is not supported", flags)
		}
		lo := r.u32()
		if r.err != nil {
			break
		}
		if lo > maxPages {
			return refuse("", ErrMemory, "declares %d pages minimum, cap is %d", lo, maxPages)
		}
		if flags&1 != 0 {
			if hi := r.u32(); r.err == nil && hi > maxPages {
				return refuse("", ErrMemory, "declares %d pages maximum, cap is %d", hi, maxPages)
			}
		}
	}
	if r.err != nil {
		return refuse("", ErrMalformed, "memory section: %v", r.err)
	}
	return nil
}

// leb reads the unsigned LEB128 integers and bytes of a module's section
// headers.
type leb struct {
	b   []byte
	i   int
	err error
}

var errTruncated = errors.New("truncated")

func (r *leb) byte() byte {
	if r.err != nil || r.i >= len(r.b) {
		r.err = errTruncated
		return 0
	}
	c := r.b[r.i]
	r.i++
	return c
}

func (r *leb) u32() uint32 {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
	r.err = fmt.Errorf("integer too long at offset %d", r.i)
	return 0
}

// hookSet is a set of hooks as a bit mask (bit n = Hook n), the same
// encoding edgereg_hooks returns.
type hookSet uint8

func (s hookSet) with(h Hook) hookSet { return s | 1<<h }
func (s hookSet) has(h Hook) bool     { return s&(1<<h) != 0 }
