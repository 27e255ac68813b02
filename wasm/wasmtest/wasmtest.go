// Package wasmtest builds hostile WebAssembly modules for tests: modules
// of the edgereg policy ABI whose route filter or table is a bomb for a
// decoder or compiler (the shapes of issue 11), as bytes, so tests need no
// toolchain and the shapes can be any size.
package wasmtest

import "bytes"

// Shape is one hostile module and the limit its refusal must name.
type Shape struct {
	Name, Limit string
	Module      []byte
}

// uleb encodes v as an unsigned LEB128 integer, as WebAssembly does.
func uleb(v uint64) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, c|0x80)
			continue
		}
		return append(out, c)
	}
}

func vec(items ...[]byte) []byte {
	out := uleb(uint64(len(items)))
	for _, it := range items {
		out = append(out, it...)
	}
	return out
}

func name(s string) []byte { return append(uleb(uint64(len(s))), s...) }

func wasmSection(id byte, payload []byte) []byte {
	return append(append([]byte{id}, uleb(uint64(len(payload)))...), payload...)
}

// hostileShape describes the parts of an ABI module a shape replaces.
type hostileShape struct {
	// body is the route filter's body after its local declarations
	// (ending in end); nil for `i64.const 0 end`.
	body []byte
	// locals are the route filter's local declarations, as (count, type).
	locals [][2]uint64
	table  []byte // a table section payload, or nil
	start  bool   // add a start section naming the version function
	extra  int    // extra functions, empty unless extraBody is set
	// extraBody is the body of every extra function (after its local
	// declarations, ending in end; type () -> ()).
	extraBody []byte
	// elem is an element section payload, or nil.
	elem []byte
	// exports are extra exports of function 0, each an export entry.
	exports [][]byte
}

// abiModule builds a module with the ABI's exports and shape's bombs.
func abiModule(sh hostileShape) []byte {
	const i32, i64 = 0x7f, 0x7e
	types := wasmSection(1, vec(
		[]byte{0x60, 0, 1, i32},           // 0: () -> i32
		[]byte{0x60, 1, i32, 1, i32},      // 1: (i32) -> i32
		[]byte{0x60, 2, i32, i32, 0},      // 2: (i32, i32) -> ()
		[]byte{0x60, 2, i32, i32, 1, i64}, // 3: (i32, i32) -> i64
		[]byte{0x60, 0, 0},                // 4: () -> ()
	))
	fnTypes := [][]byte{{0}, {1}, {2}, {3}}
	for range sh.extra {
		fnTypes = append(fnTypes, []byte{4})
	}
	funcs := wasmSection(3, vec(fnTypes...))
	memory := wasmSection(5, vec([]byte{0, 1}))
	exports := wasmSection(7, vec(append([][]byte{
		append(name("memory"), 2, 0),
		append(name("edgereg_abi_version"), 0, 0),
		append(name("edgereg_alloc"), 0, 1),
		append(name("edgereg_free"), 0, 2),
		append(name("edgereg_route_filter"), 0, 3),
	}, sh.exports...)...))
	code := func(locals [][2]uint64, body []byte) []byte {
		var decl [][]byte
		for _, l := range locals {
			decl = append(decl, append(uleb(l[0]), byte(l[1])))
		}
		b := append(vec(decl...), body...)
		return append(uleb(uint64(len(b))), b...)
	}
	body := sh.body
	if body == nil {
		body = []byte{0x42, 0, 0x0b}
	}
	bodies := [][]byte{
		code(nil, []byte{0x41, 1, 0x0b}),
		code(nil, []byte{0x41, 0x80, 0x08, 0x0b}),
		code(nil, []byte{0x0b}),
		code(sh.locals, body),
	}
	extraBody := sh.extraBody
	if extraBody == nil {
		extraBody = []byte{0x0b}
	}
	for range sh.extra {
		bodies = append(bodies, code(nil, extraBody))
	}
	out := []byte("\x00asm\x01\x00\x00\x00")
	out = append(out, types...)
	out = append(out, funcs...)
	if sh.table != nil {
		out = append(out, wasmSection(4, sh.table)...)
	}
	out = append(out, memory...)
	out = append(out, exports...)
	if sh.start {
		out = append(out, wasmSection(8, uleb(0))...)
	}
	if sh.elem != nil {
		out = append(out, wasmSection(9, sh.elem)...)
	}
	out = append(out, wasmSection(10, vec(bodies...))...)
	// {1: {1: [], 2: []}} at 64: the empty route, for a valid filter.
	route := []byte{0xa1, 0x01, 0xa2, 0x01, 0x80, 0x02, 0x80}
	seg := append([]byte{0x00, 0x41, 0xc0, 0x00, 0x0b}, uleb(uint64(len(route)))...)
	return append(out, wasmSection(11, vec(append(seg, route...)))...)
}

func repeat(b []byte, n int) []byte { return bytes.Repeat(b, n) }

// validFilter is a route filter body that answers the empty route
// {1: {1: [], 2: []}} (the data segment at 64): a module with it is valid,
// so only a limit refuses it.
var validFilter = []byte{0x42, 0x87, 0x80, 0x80, 0x80, 0x80, 0x08, 0x0b}

// HostileShapes returns every hostile shape, each a module that a policy
// host must refuse by the limit the shape names.
func HostileShapes() []Shape {
	nested := func(open []byte, n int) []byte {
		b := repeat(open, n)
		b = append(b, repeat([]byte{0x0b}, n)...)
		return append(b, 0x42, 0, 0x0b)
	}
	brTable := func(n int) []byte {
		b := []byte{0x02, 0x40, 0x41, 0, 0x0e}
		b = append(b, uleb(uint64(n))...)
		b = append(b, repeat([]byte{0}, n+1)...)
		return append(b, 0x0b, 0x42, 0, 0x0b)
	}
	stack := func(n int) []byte {
		b := repeat([]byte{0x41, 0}, n)
		b = append(b, repeat([]byte{0x1a}, n)...)
		return append(b, 0x42, 0, 0x0b)
	}
	// passive is an element section of one passive segment of n
	// references to function 0: wazero keeps ~110 bytes per entry for the
	// module and 8 more per instance, where the binary spends one.
	passive := func(n int) []byte {
		seg := append([]byte{0x01, 0x00}, uleb(uint64(n))...)
		return vec(append(seg, repeat([]byte{0}, n)...))
	}
	// exports are n distinct three-character export names for function 0.
	exports := func(n int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = append(name(string([]byte{byte(0x21 + i%94), byte(0x21 + i/94%94), byte(0x21 + i/94/94%94)})), 0, 0)
		}
		return out
	}
	tableGrow := append(append([]byte{0xd0, 0x70, 0x41}, uleb(1_000_000)...), 0xfc, 15, 0, 0x1a, 0x42, 0, 0x0b)
	return []Shape{
		{"locals-2^32-1", "locals", abiModule(hostileShape{locals: [][2]uint64{{1<<32 - 1, 0x7f}}})},
		{"locals-2^24", "locals", abiModule(hostileShape{locals: [][2]uint64{{1 << 24, 0x7f}}})},
		{"locals-overflow", "locals", abiModule(hostileShape{locals: [][2]uint64{{1<<32 - 1, 0x7f}, {1<<32 - 1, 0x7f}, {2, 0x7f}}})},
		{"nested-blocks-100k", "nesting depth", abiModule(hostileShape{body: nested([]byte{0x02, 0x40}, 100_000)})},
		{"nested-loops-300k", "nesting depth", abiModule(hostileShape{body: nested([]byte{0x03, 0x40}, 300_000)})},
		{"nested-ifs-150k", "nesting depth", abiModule(hostileShape{body: nested([]byte{0x41, 0, 0x04, 0x40}, 150_000)})},
		{"br_table-900k", "br_table targets", abiModule(hostileShape{body: brTable(900_000)})},
		{"operand-stack-300k", "operand stack height", abiModule(hostileShape{body: stack(300_000)})},
		// The sizes issue 11 measured are over the body size limit first.
		{"nested-loops-1M", "body size", abiModule(hostileShape{body: nested([]byte{0x03, 0x40}, 1_000_000)})},
		{"nested-ifs-700k", "body size", abiModule(hostileShape{body: nested([]byte{0x41, 0, 0x04, 0x40}, 700_000)})},
		{"br_table-3.9M", "body size", abiModule(hostileShape{body: brTable(3_900_000)})},
		{"operand-stack-1M", "body size", abiModule(hostileShape{body: stack(1_000_000)})},
		{"huge-function", "body size", abiModule(hostileShape{body: append(repeat([]byte{0x01}, 2<<20), 0x42, 0, 0x0b)})},
		{"table-100M", "table 0 minimum entries", abiModule(hostileShape{table: vec([]byte{0x70, 0, 0x80, 0xc2, 0xd7, 0x2f})})},
		{"table-grow-unbounded", "table.grow, so its table must declare a maximum", abiModule(hostileShape{table: vec([]byte{0x70, 0, 1}), body: tableGrow})},
		{"two-tables", "tables", abiModule(hostileShape{table: vec([]byte{0x70, 0, 1}, []byte{0x70, 0, 1})})},
		{"functions-30k", "functions", abiModule(hostileShape{extra: 30_000})},
		{"start-function", "start function", abiModule(hostileShape{start: true})},
		{"passive-elements-4M", "element entries", abiModule(hostileShape{body: validFilter, elem: passive(4_000_000)})},
		{"exports-600k", "exports", abiModule(hostileShape{body: validFilter, exports: exports(600_000)})},
	}
}

// DivisionChain returns a valid ABI module with functions extra functions,
// each a chain of ops signed 64-bit divisions: wazero emits about 45 bytes
// of machine code for each 3-byte division (zero and overflow checks), so
// a module of 3.6 MB (12 functions of 100,000) compiles to about 160 MB of
// code, which the node maps for as long as it keeps the module.
func DivisionChain(functions, ops int) []byte {
	body := []byte{0x42, 1}
	body = append(body, repeat([]byte{0x42, 1, 0x7f}, ops)...)
	body = append(body, 0x1a, 0x0b)
	return abiModule(hostileShape{extra: functions, extraBody: body, body: validFilter})
}

// SlowCompile returns a valid ABI module of 4 MB, within every structural
// limit, whose compilation takes about 20 s on a loaded 2-core machine
// (330 functions of blocks nested 4,000 deep): an upload that runs until
// its deadline.
func SlowCompile() []byte {
	body := append(repeat([]byte{0x02, 0x40}, 4000), repeat([]byte{0x0b}, 4001)...)
	return abiModule(hostileShape{extra: 330, extraBody: body, body: validFilter})
}

// DebugInfoBomb returns a valid ABI module whose route filter traps and
// which carries DWARF custom sections: one compilation unit covering the
// whole code section whose line program has rows rows (one byte each).
// A runtime that reads DWARF to name a trap's source line reads every row
// into memory (wazero keeps about 120 bytes per row, for as long as it
// keeps the module), outside the call's deadline.
func DebugInfoBomb(rows int) []byte {
	le32 := func(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }
	custom := func(n string, payload []byte) []byte { return wasmSection(0, append(name(n), payload...)) }
	// compile_unit, no children: stmt_list (sec_offset), low_pc (addr),
	// high_pc (data4, a length).
	abbrev := []byte{1, 0x11, 0, 0x10, 0x17, 0x11, 0x01, 0x12, 0x06, 0, 0, 0}
	die := append([]byte{1}, le32(0)...)             // stmt_list
	die = append(die, le32(1)...)                    // low_pc: 0 reads as a tombstone
	die = append(die, le32(0x7fff_ffff)...)          // high_pc
	unit := append([]byte{4, 0}, le32(0)...)         // version 4, abbrev offset
	unit = append(append(unit, 4), die...)           // address size
	info := append(le32(uint32(len(unit))), unit...) // unit length
	hdr := []byte{1, 1, 1, 0xfb, 14, 13, 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1}
	hdr = append(hdr, 0)                      // no include directories
	hdr = append(hdr, 'a', 0, 0, 0, 0)        // one file
	hdr = append(hdr, 0)                      // end of files
	prog := repeat([]byte{13 + 14 + 5}, rows) // special opcode: address +1, line +0
	prog = append(prog, 0, 1, 1)              // end_sequence
	body := append([]byte{4, 0}, le32(uint32(len(hdr)))...)
	body = append(append(body, hdr...), prog...)
	line := append(le32(uint32(len(body))), body...)
	out := abiModule(hostileShape{body: []byte{0x00, 0x0b}}) // unreachable
	out = append(out, custom(".debug_abbrev", abbrev)...)
	out = append(out, custom(".debug_info", info)...)
	return append(out, custom(".debug_line", line)...)
}

// WithNames returns a valid ABI module with a name section whose
// subsection sub (1 function names, 2 local names) declares count entries
// and holds entries copies of entry. wazero reads these subsections past
// their declared sizes, so each declares 0; it sizes its tables by count
// and keeps 24 to 32 bytes per entry, where the binary spends two.
func WithNames(sub byte, count, entries int, entry []byte) []byte {
	payload := append([]byte{sub, 0}, uleb(uint64(count))...)
	payload = append(payload, repeat(entry, entries)...)
	return append(abiModule(hostileShape{body: validFilter}), wasmSection(0, append(name("name"), payload...))...)
}

// LongNamedTrap returns a valid ABI module whose route filter, named by
// a name of nameLen bytes in the name section, calls itself 100 times
// (its first argument, the input's address 1024, counting up) and traps:
// wazero writes the function's name into the trap's stack trace once per
// frame.
func LongNamedTrap(nameLen int) []byte {
	body := []byte{
		0x20, 0, 0x41, 0xc8, 0x08, 0x4b, // local.get 0; i32.const 1096; i32.gt_u
		0x04, 0x40, 0x00, 0x0b, // if unreachable end
		0x20, 0, 0x41, 1, 0x6a, 0x20, 1, 0x10, 3, // call self (local 0 + 1, local 1)
		0x0b,
	}
	names := append([]byte{1}, uleb(1)...) // one function name: function 3
	names = append(append(names, 3), name(string(repeat([]byte{'f'}, nameLen)))...)
	sub := append([]byte{1}, uleb(uint64(len(names)-1))...)
	sub = append(sub, names[1:]...)
	return append(abiModule(hostileShape{body: body}), wasmSection(0, append(name("name"), sub...))...)
}
