package wasm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// abiFuncs are the ABI's required functions without memory, for modules
// that declare their own memories.
const abiFuncs = `
  (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "edgereg_free") (param i32 i32))`

// okFilter answers the empty route at 64 (abiPrelude's data).
const okFilter = `(func (export "edgereg_route_filter") (param i32 i32) (result i64) (i64.const 0x0000004000000007))`

// hostileWAT is one hostile module in WebAssembly text and what the host
// must do with it: refuse it with the reason (want), or accept it (nil).
type hostileWAT struct {
	name  string
	src   string
	flags []string
	want  error  // nil: the module is valid and must be accepted
	text  string // a part of the refusal's message
}

func hostileWATs() []hostileWAT {
	wasi := func(imports, body string) string {
		return `(module ` + imports + abiPrelude + `
  (func (export "edgereg_route_filter") (param i32 i32) (result i64) ` + body + ` (i64.const 0x0000004000000007)))`
	}
	route := func(body string) string { return wasi("", body) }
	return []hostileWAT{
		{name: "memory-min-65536", src: `(module (memory (export "memory") 65536)` + abiFuncs + okFilter + `)`, want: ErrMemory, text: "65536 pages minimum"},
		{name: "memory-max-65536", src: `(module (memory (export "memory") 1 65536)` + abiFuncs + okFilter + `)`, want: ErrMemory, text: "65536 pages maximum"},
		{name: "memory-shared", src: `(module (memory (export "memory") 1 1 shared)` + abiFuncs + okFilter + `)`, flags: []string{"--enable-threads"}, want: ErrMemory, text: "shared"},
		{name: "memory-64", src: `(module (memory (export "memory") i64 1)` + abiFuncs + okFilter + `)`, flags: []string{"--enable-memory64"}, want: ErrMemory, text: "64-bit"},
		{name: "multi-memory", src: `(module (memory (export "memory") 1) (memory 1)` + abiFuncs + okFilter + `)`, flags: []string{"--enable-multi-memory"}, want: ErrMalformed},
		{name: "no-memory", src: `(module ` + abiFuncs + okFilter + `)`, want: ErrExport, text: "memory"},
		{name: "memory-imported", src: `(module (import "wasi_snapshot_preview1" "memory" (memory 1)) (export "memory" (memory 0))` + abiFuncs + okFilter + `)`, want: ErrForbiddenImport},
		{name: "table-huge", src: `(module (table 10000000 funcref)` + abiPrelude + okFilter + `)`, want: ErrLimit, text: "table 0 minimum entries"},
		{name: "table-imported", src: `(module (import "wasi_snapshot_preview1" "t" (table 1 funcref))` + abiPrelude + okFilter + `)`, want: ErrForbiddenImport},
		{name: "global-imported", src: `(module (import "wasi_snapshot_preview1" "g" (global i32))` + abiPrelude + okFilter + `)`, want: ErrForbiddenImport},
		{name: "import-env", src: wasi(`(import "env" "now" (func (result i64)))`, ""), want: ErrForbiddenImport, text: "env.now"},
		{name: "import-fd-read", src: wasi(`(import "wasi_snapshot_preview1" "fd_read" (func (param i32 i32 i32 i32) (result i32)))`, ""), want: ErrForbiddenImport, text: "fd_read"},
		{name: "import-allowed-wrong-sig", src: wasi(`(import "wasi_snapshot_preview1" "fd_write" (func (param i64) (result i64)))`, ""), want: ErrForbiddenImport, text: "fd_write"},
		{name: "start-loop", src: `(module ` + abiPrelude + okFilter + ` (func $s (loop $l (br $l))) (start $s))`, want: ErrStartFunction, text: "_initialize"},
		{name: "initialize-loop", src: `(module ` + abiPrelude + okFilter + ` (func (export "_initialize") (loop $l (br $l))))`, want: ErrDryRun, text: "deadline"},
		{name: "initialize-trap", src: `(module ` + abiPrelude + okFilter + ` (func (export "_initialize") unreachable))`, want: ErrDryRun, text: "unreachable"},
		{name: "hook-loop", src: route(`(loop $l (br $l))`), want: ErrDryRun, text: "deadline"},
		{name: "hook-unreachable", src: route(`unreachable`), want: ErrDryRun, text: "unreachable"},
		{name: "hook-div-zero", src: route(`(drop (i32.div_u (i32.const 1) (i32.const 0)))`), want: ErrDryRun, text: "divide by zero"},
		{name: "hook-oob-load", src: route(`(drop (i32.load (i32.const 0x7fffffff)))`), want: ErrDryRun, text: "out of bounds"},
		{name: "hook-indirect-null", src: `(module (table 1 funcref)` + abiPrelude + `
  (type $t (func))
  (func (export "edgereg_route_filter") (param i32 i32) (result i64) (call_indirect (type $t) (i32.const 0)) (i64.const 0x0000004000000007)))`, want: ErrDryRun},
		{name: "version-2", src: `(module (memory (export "memory") 1) (func (export "edgereg_abi_version") (result i32) (i32.const 2))
  (func (export "edgereg_alloc") (param i32) (result i32) (i32.const 1024)) (func (export "edgereg_free") (param i32 i32))` + okFilter + `)`, want: ErrABIVersion},
		{name: "version-traps", src: `(module (memory (export "memory") 1) (func (export "edgereg_abi_version") (result i32) unreachable)
  (func (export "edgereg_alloc") (param i32) (result i32) (i32.const 1024)) (func (export "edgereg_free") (param i32 i32))` + okFilter + `)`, want: ErrDryRun},
		{name: "version-loops", src: `(module (memory (export "memory") 1) (func (export "edgereg_abi_version") (result i32) (loop $l (br $l)) (i32.const 1))
  (func (export "edgereg_alloc") (param i32) (result i32) (i32.const 1024)) (func (export "edgereg_free") (param i32 i32))` + okFilter + `)`, want: ErrDryRun},
		{name: "alloc-wrong-sig", src: `(module (memory (export "memory") 1) (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param i64) (result i32) (i32.const 1024)) (func (export "edgereg_free") (param i32 i32))` + okFilter + `)`, want: ErrExport, text: "edgereg_alloc"},
		{name: "alloc-missing", src: `(module (memory (export "memory") 1) (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_free") (param i32 i32))` + okFilter + `)`, want: ErrExport, text: "edgereg_alloc"},
		{name: "hook-wrong-sig", src: `(module ` + abiPrelude + ` (func (export "edgereg_route_filter") (param i32 i32) (result i32) (i32.const 0)))`, want: ErrExport},
		{name: "hooks-mask-traps", src: `(module ` + abiPrelude + okFilter + ` (func (export "edgereg_hooks") (result i32) unreachable))`, want: ErrDryRun},
		{name: "hooks-mask-unexported", src: `(module ` + abiPrelude + okFilter + ` (func (export "edgereg_hooks") (result i32) (i32.const 2)))`, want: ErrExport},
		{name: "memory-export-is-table", src: `(module (memory 1) (table (export "memory") 1 funcref)` + abiFuncs + okFilter + `)`, want: ErrExport},
		{name: "data-out-of-range", src: `(module (memory (export "memory") 1)` + abiFuncs + okFilter + ` (data (i32.const 0x20000) "x"))`, want: ErrDryRun, text: "out of bounds"},
		{name: "elem-out-of-range", src: `(module (table 1 funcref) (memory (export "memory") 1)` + abiFuncs + okFilter + ` (func $f) (elem (i32.const 5) $f))`, want: ErrDryRun},
		{name: "alloc-returns-0", src: `(module (memory (export "memory") 1) (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param i32) (result i32) (i32.const 0)) (func (export "edgereg_free") (param i32 i32))` + okFilter + `)`, want: ErrDryRun, text: "returned 0"},
		{name: "alloc-past-memory", src: `(module (memory (export "memory") 1) (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param i32) (result i32) (i32.const 0xfffffff0)) (func (export "edgereg_free") (param i32 i32))` + okFilter + `)`, want: ErrDryRun, text: "outside memory"},
		{name: "alloc-at-end", src: `(module (memory (export "memory") 1) (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param i32) (result i32) (i32.const 65530)) (func (export "edgereg_free") (param i32 i32))` + okFilter + `)`, want: ErrDryRun, text: "outside memory"},
		{name: "alloc-loops", src: `(module (memory (export "memory") 1) (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param i32) (result i32) (loop $l (br $l)) (i32.const 1024)) (func (export "edgereg_free") (param i32 i32))` + okFilter + `)`, want: ErrDryRun, text: "deadline"},
		{name: "alloc-grows-memory", src: `(module (memory (export "memory") 1) (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param i32) (result i32) (loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1)))) (i32.const 1024))
  (func (export "edgereg_free") (param i32 i32)) (data (i32.const 64) "\a1\01\a2\01\80\02\80")` + okFilter + `)`},
		{name: "free-traps", src: `(module (memory (export "memory") 1) (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param i32) (result i32) (i32.const 1024)) (func (export "edgereg_free") (param i32 i32) unreachable)
  (data (i32.const 64) "\a1\01\a2\01\80\02\80")` + okFilter + `)`, want: ErrDryRun, text: "unreachable"},
		{name: "grow-loop", src: wasi("", `(loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1))))`)},
		{name: "grow-huge", src: wasi("", `(if (i32.ne (memory.grow (i32.const 0x7fffffff)) (i32.const -1)) (then unreachable))`)},
		{name: "table-grow-huge", src: `(module (table 1 funcref)` + abiPrelude + `
  (func (export "edgereg_route_filter") (param i32 i32) (result i64)
    (if (i32.ne (table.grow 0 (ref.null func) (i32.const 0x7fffffff)) (i32.const -1)) (then unreachable))
    (i64.const 0x0000004000000007)))`, want: ErrLimit, text: "table.grow"},
		{name: "out-ptr-past-memory", src: route(`(return (i64.const 0x7fff000000000010))`), want: ErrDryRun, text: "outside memory"},
		{name: "out-len-past-memory", src: route(`(return (i64.const 0x000000400000ffff))`), want: ErrDryRun, text: "cap is"},
		{name: "out-len-huge", src: route(`(return (i64.const 0x00000040ffffffff))`), want: ErrDryRun, text: "4294967295 bytes, cap is"},
		{name: "out-len-over-cap", src: route(`(return (i64.const 0x0000000000200000))`), want: ErrDryRun, text: "cap"},
		{name: "out-negative", src: route(`(return (i64.const -1))`), want: ErrDryRun},
		{name: "out-zero", src: route(`(return (i64.const 0))`), want: ErrDryRun},
		{name: "out-garbage", src: route(`(return (i64.const 0x0000000000000100))`), want: ErrDryRun, text: "invalid"},
		{name: "simd", src: route(`(drop (i32x4.extract_lane 0 (i32x4.add (v128.const i32x4 1 2 3 4) (v128.const i32x4 1 2 3 4))))`)},
		{name: "bulk-memory", src: route(`(memory.fill (i32.const 2048) (i32.const 0) (i32.const 1000)) (memory.copy (i32.const 4096) (i32.const 64) (i32.const 7))`)},
		{name: "bulk-memory-oob", src: route(`(memory.fill (i32.const 0) (i32.const 0) (i32.const 0x7fffffff))`), want: ErrDryRun, text: "out of bounds"},
		{name: "atomics", src: `(module (memory (export "memory") 1)` + abiFuncs + ` (data (i32.const 64) "\a1\01\a2\01\80\02\80")
  (func (export "edgereg_route_filter") (param i32 i32) (result i64) (drop (i32.atomic.rmw.add (i32.const 0) (i32.const 1))) (i64.const 0x0000004000000007)))`, flags: []string{"--enable-threads"}, want: ErrMalformed},
		{name: "exceptions", src: `(module ` + abiPrelude + ` (tag $e)
  (func (export "edgereg_route_filter") (param i32 i32) (result i64) (throw $e)))`, flags: []string{"--enable-exceptions"}, want: ErrMalformed},
		{name: "tail-call", src: `(module ` + abiPrelude + ` (func $f (result i64) (i64.const 0x0000004000000007))
  (func (export "edgereg_route_filter") (param i32 i32) (result i64) (return_call $f)))`, flags: []string{"--enable-tail-call"}, want: ErrMalformed},
		{name: "proc-exit", src: wasi(`(import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))`, `(call $exit (i32.const 3))`), want: ErrDryRun, text: "exited with code 3"},
		{name: "fd-write-bad-iovec", src: wasi(`(import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))`,
			`(drop (call $w (i32.const 1) (i32.const 0xfffffff0) (i32.const 0x7fffffff) (i32.const 0xfffffff0)))`)},
		{name: "fd-write-huge-iovec", src: wasi(`(import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))`,
			`(i32.store (i32.const 2048) (i32.const 0)) (i32.store (i32.const 2052) (i32.const 0x7fffffff)) (drop (call $w (i32.const 1) (i32.const 2048) (i32.const 1) (i32.const 2056)))`)},
		{name: "fd-write-bad-fd", src: wasi(`(import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))`,
			`(drop (call $w (i32.const 99) (i32.const 2048) (i32.const 1) (i32.const 2056)))`)},
		{name: "random-get-huge", src: wasi(`(import "wasi_snapshot_preview1" "random_get" (func $r (param i32 i32) (result i32)))`,
			`(drop (call $r (i32.const 0) (i32.const 0x7fffffff)))`)},
		{name: "clock-bad-ptr", src: wasi(`(import "wasi_snapshot_preview1" "clock_time_get" (func $c (param i32 i64 i32) (result i32)))`,
			`(drop (call $c (i32.const 0) (i64.const 0) (i32.const 0xffffffff)))`)},
		{name: "poll-huge", src: wasi(`(import "wasi_snapshot_preview1" "poll_oneoff" (func $p (param i32 i32 i32 i32) (result i32)))`,
			`(drop (call $p (i32.const 0) (i32.const 0) (i32.const 0x7fffffff) (i32.const 0)))`)},
		{name: "poll-sleep-forever", src: wasi(`(import "wasi_snapshot_preview1" "poll_oneoff" (func $p (param i32 i32 i32 i32) (result i32)))`,
			// one clock subscription: relative timeout 2^63 ns
			`(i64.store (i32.const 2048) (i64.const 0)) (i32.store8 (i32.const 2056) (i32.const 0)) (i32.store (i32.const 2064) (i32.const 0))
			 (i64.store (i32.const 2072) (i64.const 0x7fffffffffffffff)) (i64.store (i32.const 2080) (i64.const 0)) (i32.store16 (i32.const 2088) (i32.const 0))
			 (drop (call $p (i32.const 2048) (i32.const 4096) (i32.const 1) (i32.const 8192)))`)}, // no real sleeping: it returns at once
		{name: "args-bad-ptr", src: wasi(`(import "wasi_snapshot_preview1" "args_sizes_get" (func $a (param i32 i32) (result i32)))`,
			`(drop (call $a (i32.const 0xfffffffc) (i32.const 0xfffffffc)))`)},
		{name: "prestat-bad-fd", src: wasi(`(import "wasi_snapshot_preview1" "fd_prestat_dir_name" (func $p (param i32 i32 i32) (result i32)))`,
			`(drop (call $p (i32.const 3) (i32.const 0xffffff00) (i32.const 0x7fffffff)))`)},
		{name: "fd-close-stdout", src: wasi(`(import "wasi_snapshot_preview1" "fd_close" (func $c (param i32) (result i32)))`,
			`(drop (call $c (i32.const 1))) (drop (call $c (i32.const 0))) (drop (call $c (i32.const 2)))`)},
	}
}

// TestHostileModulesSweep validates each hostile module: the host refuses
// it with the ABI's reason (or accepts a legal one), never panics or
// hangs, and a legal module's calls stay within the memory cap.
func TestHostileModulesSweep(t *testing.T) {
	// Deadlines far beyond what a legal call needs, even under -race on
	// a loaded machine (a call growing memory to the cap copies it): only
	// the modules that loop wait for them.
	refusing := newHost(t, HostConfig{CallTimeout: time.Second, InitTimeout: 2 * time.Second})
	legal := newHost(t, HostConfig{CallTimeout: 30 * time.Second, InitTimeout: 30 * time.Second})
	for _, c := range hostileWATs() {
		t.Run(c.name, func(t *testing.T) {
			b := watWith(t, c.src, c.flags...)
			h := refusing
			if c.want == nil {
				h = legal
			}
			m, err := h.Validate(context.Background(), b)
			if m != nil {
				defer m.Close()
			}
			t.Logf("%v", err)
			if c.want == nil {
				if err != nil {
					t.Fatalf("a legal module refused: %v", err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("Validate = %v, want a refusal for %v naming %q", err, c.want, c.text)
			}
		})
	}
}
