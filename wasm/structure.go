package wasm

import (
	"errors"
	"fmt"
	"math"
)

// Structural limits. wazero allocates what a module declares before it
// has seen the code that would justify it (2^32-1 locals in a 188-byte
// module is an out-of-memory crash in its decoder), and its compiler is
// superlinear in nesting depth and br_table size. So Host.Validate reads
// the binary itself first, with a parser whose memory follows the bytes
// it reads, never a count the module declares, and refuses a module that
// breaks a limit before wazero sees it.
//
// The defaults leave about four times the headroom the shipped Go
// modules need (measured by TestStructureOfShippedModules).
const (
	DefaultMaxFunctions    = 20_000  // functions defined by the module
	DefaultMaxTypes        = 10_000  // function types
	DefaultMaxLocals       = 10_000  // locals per function, parameters included
	DefaultMaxBodySize     = 1 << 20 // bytes of one function body
	DefaultMaxNesting      = 4096    // nested block/loop/if in one function
	DefaultMaxBrTable      = 16_384  // targets of one br_table, its default not counted
	DefaultMaxStackHeight  = 4096    // estimated operand stack height in one function
	DefaultMaxTables       = 1       // tables
	DefaultMaxTableEntries = 65_536  // entries of a table, declared or grown to
	DefaultMaxGlobals      = 10_000  // globals
	DefaultMaxDataSegments = 100_000 // data segments (a Go module has about 23,000)
	DefaultMaxElemSegments = 10_000  // element segments
	// DefaultMaxElemEntries bounds the references of all element segments
	// together: wazero keeps about 110 bytes per entry for a compiled
	// module and 8 more per instance, where the binary spends one (4M
	// passive entries in a 4 MB module were +426 MiB of the node's RSS).
	// A Go module has one segment of 1,367 entries; an active segment
	// cannot usefully outgrow the table cap, which this equals.
	DefaultMaxElemEntries = 65_536
	// DefaultMaxExports bounds exports: wazero keeps about 240 bytes per
	// export (600k three-letter exports were +140 MiB). A Go module has
	// about ten.
	DefaultMaxExports        = 10_000
	maxParamsOrResultsPerSig = 1000 // wazero's own limit
)

// Limits bounds a module's structure. Zero fields get the Default* values.
type Limits struct {
	Functions, Types, Locals, BodySize, Nesting, BrTable, StackHeight int
	Tables, TableEntries, Globals, DataSegments, ElemSegments         int
	ElemEntries, Exports                                              int
}

func (l *Limits) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.Functions, DefaultMaxFunctions)
	def(&l.Types, DefaultMaxTypes)
	def(&l.Locals, DefaultMaxLocals)
	def(&l.BodySize, DefaultMaxBodySize)
	def(&l.Nesting, DefaultMaxNesting)
	def(&l.BrTable, DefaultMaxBrTable)
	def(&l.StackHeight, DefaultMaxStackHeight)
	def(&l.Tables, DefaultMaxTables)
	def(&l.TableEntries, DefaultMaxTableEntries)
	def(&l.Globals, DefaultMaxGlobals)
	def(&l.DataSegments, DefaultMaxDataSegments)
	def(&l.ElemSegments, DefaultMaxElemSegments)
	def(&l.ElemEntries, DefaultMaxElemEntries)
	def(&l.Exports, DefaultMaxExports)
}

// Structure is what checkStructure measured of a module: the largest value
// of each limited quantity.
type Structure struct {
	Functions, Types, Locals, BodySize, Nesting, BrTable, StackHeight int
	Tables, TableEntries, Globals, DataSegments, ElemSegments         int
	ElemEntries, Exports                                              int
	HasStart                                                          bool
}

// ErrLimit is the refusal reason of a module that breaks a structural
// limit or the compile child's memory or time limit; the detail names the
// limit.
var ErrLimit = errors.New("module exceeds a limit")

// ErrStartFunction is the refusal reason of a module with a start section.
var ErrStartFunction = errors.New("module has a start function")

type funcType struct{ params, results int }

// structParser walks a module binary. Every count it reads is checked
// against the bytes left before anything is sized by it.
type structParser struct {
	r     leb
	lim   Limits
	st    Structure
	types []funcType
	funcs []uint32 // type index of every function, imports first
	// imported counts imported functions (checkImports refuses the rest).
	imported   int
	tableMax   []uint64 // effective maximum of each table
	tableGrown bool
}

// checkStructure parses a module's sections and refuses it if it breaks
// a limit. It returns what it measured, for tests and operators.
func checkStructure(b []byte, lim Limits) (Structure, *ValidationError) {
	lim.setDefaults()
	p := &structParser{r: leb{b: b}, lim: lim}
	ve := p.module()
	if ve == nil && p.r.err != nil {
		ve = refuse("", ErrMalformed, "%v", p.r.err)
	}
	return p.st, ve
}

func (p *structParser) limit(name string, have uint64, max int, where string) *ValidationError {
	if have > uint64(max) {
		return refuse("", ErrLimit, "%s%s: %d, limit is %d", where, name, have, max)
	}
	return nil
}

func (p *structParser) module() *ValidationError {
	b := p.r.b
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return refuse("", ErrMalformed, "no WebAssembly magic number")
	}
	if v := uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24; v != 1 {
		return refuse("", ErrMalformed, "binary format version %d, want 1", v)
	}
	p.r.i = 8
	for p.r.i < len(b) {
		id := p.r.byte()
		size := p.r.u32()
		if p.r.err != nil {
			return refuse("", ErrMalformed, "section header: %v", p.r.err)
		}
		start := p.r.i
		end := start + int(size)
		if end > len(b) || end < start {
			return refuse("", ErrMalformed, "section %d overruns the module", id)
		}
		p.r.b = b[:end] // a section's reads stop at its end
		ve := p.section(id)
		p.r.b = b
		if ve != nil {
			return ve
		}
		if p.r.err != nil {
			return refuse("", ErrMalformed, "section %d: %v", id, p.r.err)
		}
		p.r.i = end
	}
	if p.tableGrown {
		for i, m := range p.tableMax {
			if m == math.MaxUint64 {
				return refuse("", ErrLimit, "table %d entries: the module uses table.grow, so its table must declare a maximum (limit is %d)", i, p.lim.TableEntries)
			}
		}
	}
	return nil
}

// count reads a vector length, which cannot exceed the bytes left (every
// element takes at least one byte), and checks it against a limit.
func (p *structParser) count(name string, max int) (int, *ValidationError) {
	n := p.r.u32()
	if p.r.err != nil {
		return 0, refuse("", ErrMalformed, "%s count: %v", name, p.r.err)
	}
	if ve := p.limit(name, uint64(n), max, ""); ve != nil {
		return 0, ve
	}
	if int(n) > len(p.r.b)-p.r.i {
		return 0, refuse("", ErrMalformed, "%d %s declared in %d bytes", n, name, len(p.r.b)-p.r.i)
	}
	return int(n), nil
}

func (p *structParser) section(id byte) *ValidationError {
	switch id {
	case 1:
		return p.typeSection()
	case 2:
		return p.importSection()
	case 3:
		return p.functionSection()
	case 4:
		return p.tableSection()
	case 6:
		n, ve := p.count("globals", p.lim.Globals)
		p.st.Globals = n
		return ve
	case 7:
		n, ve := p.count("exports", p.lim.Exports)
		p.st.Exports = n
		return ve
	case 8:
		p.st.HasStart = true
		return refuse("", ErrStartFunction, "a start function would run at every instantiation, before the host can set a deadline; use _initialize")
	case 9:
		return p.elementSection()
	case 10:
		return p.codeSection()
	case 11:
		n, ve := p.count("data segments", p.lim.DataSegments)
		p.st.DataSegments = n
		return ve
	}
	return nil
}

func (p *structParser) typeSection() *ValidationError {
	n, ve := p.count("types", p.lim.Types)
	if ve != nil {
		return ve
	}
	p.st.Types = n
	for i := range n {
		if form := p.r.byte(); form != 0x60 {
			return refuse("", ErrMalformed, "type %d: form %#x, want 0x60", i, form)
		}
		var ft funcType
		for j := range 2 {
			k, ve := p.count("parameters or results of a type", maxParamsOrResultsPerSig)
			if ve != nil {
				return ve
			}
			p.r.i += k // value types: one byte each
			if j == 0 {
				ft.params = k
			} else {
				ft.results = k
			}
		}
		if p.r.i > len(p.r.b) {
			p.r.err = errTruncated
			return nil
		}
		p.types = append(p.types, ft)
	}
	return nil
}

func (p *structParser) importSection() *ValidationError {
	n, ve := p.count("imports", p.lim.Functions)
	if ve != nil {
		return ve
	}
	for range n {
		var names [2]string // module and field
		for j := range names {
			k := p.r.u32()
			if p.r.err != nil || int(k) > len(p.r.b)-p.r.i {
				p.r.err = errTruncated
				return nil
			}
			names[j] = string(p.r.b[p.r.i : p.r.i+int(k)])
			p.r.i += int(k)
		}
		switch kind := p.r.byte(); kind {
		case 0:
			p.funcs = append(p.funcs, p.r.u32())
			p.imported++
		case 1, 2, 3: // ABI.md: functions only; checkImports checks which
			what := [...]string{1: "table", 2: "memory", 3: "global"}[kind]
			return refuse("", ErrForbiddenImport, "imports %s %.64q.%.64q: a module imports functions only, and defines its own memory, tables and globals", what, names[0], names[1])
		default:
			return refuse("", ErrMalformed, "import kind %#x", kind)
		}
	}
	return nil
}

func (p *structParser) functionSection() *ValidationError {
	n, ve := p.count("functions", p.lim.Functions)
	if ve != nil {
		return ve
	}
	p.st.Functions = n
	for range n {
		p.funcs = append(p.funcs, p.r.u32())
	}
	return nil
}

// limits reads a limits pair; max is MaxUint64 when absent.
func (p *structParser) limits() (lo, hi uint64) {
	flags := p.r.byte()
	lo, hi = uint64(p.r.u32()), math.MaxUint64
	if flags&1 != 0 {
		hi = uint64(p.r.u32())
	}
	return lo, hi
}

func (p *structParser) tableSection() *ValidationError {
	n, ve := p.count("tables", p.lim.Tables)
	if ve != nil {
		return ve
	}
	p.st.Tables = n
	for i := range n {
		p.r.byte() // reference type
		lo, hi := p.limits()
		where := fmt.Sprintf("table %d ", i)
		if ve := p.limit("minimum entries", lo, p.lim.TableEntries, where); ve != nil {
			return ve
		}
		if hi != math.MaxUint64 {
			if ve := p.limit("maximum entries", hi, p.lim.TableEntries, where); ve != nil {
				return ve
			}
		}
		p.st.TableEntries = max(p.st.TableEntries, int(lo))
		p.tableMax = append(p.tableMax, hi)
	}
	return nil
}

// elementSection counts the entries of every element segment against
// one limit for all of them.
func (p *structParser) elementSection() *ValidationError {
	n, ve := p.count("element segments", p.lim.ElemSegments)
	if ve != nil {
		return ve
	}
	p.st.ElemSegments = n
	for i := range n {
		flags := p.r.u32()
		if p.r.err != nil || flags > 7 {
			return refuse("", ErrMalformed, "element segment %d: flags %d", i, flags)
		}
		if flags&3 == 2 { // explicit table index
			p.r.u32()
		}
		if flags&1 == 0 { // active: an offset expression
			p.constExpr()
		}
		if flags&3 != 0 { // elemkind or reference type
			p.r.byte()
		}
		k := p.r.u32()
		total := uint64(p.st.ElemEntries) + uint64(k)
		if ve := p.limit("element entries (all segments)", total, p.lim.ElemEntries, ""); ve != nil {
			return ve
		}
		p.st.ElemEntries = int(total)
		for range k {
			if flags&4 == 0 {
				p.r.u32() // a function index
			} else {
				p.constExpr()
			}
			if p.r.err != nil {
				return nil
			}
		}
	}
	return nil
}

// constExpr skips a constant expression up to its end. wazero validates
// it; this only finds where it ends.
func (p *structParser) constExpr() {
	for p.r.err == nil {
		switch op := p.r.byte(); op {
		case 0x0B:
			return
		case 0x41, 0x42: // i32.const, i64.const
			p.r.sleb()
		case 0x43:
			p.r.i += 4
		case 0x44:
			p.r.i += 8
		case 0x23, 0xD2: // global.get, ref.func
			p.r.u32()
		case 0xD0: // ref.null t
			p.r.byte()
		case 0x6A, 0x6B, 0x6C, 0x7C, 0x7D, 0x7E: // extended constant arithmetic
		case 0xFD:
			if p.r.u32() == 12 { // v128.const
				p.r.i += 16
			}
		default:
			p.r.err = fmt.Errorf("instruction %#x in a constant expression at offset %d", op, p.r.i-1)
		}
	}
}

func (p *structParser) codeSection() *ValidationError {
	n, ve := p.count("function bodies", p.lim.Functions)
	if ve != nil {
		return ve
	}
	for i := range n {
		size := p.r.u32()
		if p.r.err != nil {
			return nil
		}
		where := fmt.Sprintf("function %d ", p.imported+i)
		if ve := p.limit("body size in bytes", uint64(size), p.lim.BodySize, where); ve != nil {
			return ve
		}
		end := p.r.i + int(size)
		if end > len(p.r.b) {
			return refuse("", ErrMalformed, "%sbody overruns the code section", where)
		}
		p.st.BodySize = max(p.st.BodySize, int(size))
		section := p.r.b
		p.r.b = section[:end]
		ve := p.body(p.imported+i, where)
		p.r.b = section
		if ve != nil {
			return ve
		}
		if p.r.err != nil {
			return refuse("", ErrMalformed, "%sbody: %v", where, p.r.err)
		}
		p.r.i = end
	}
	return nil
}

// body checks one function: locals (declared counts summed with overflow
// checks), nesting depth, br_table sizes and an upper estimate of the
// operand stack height, by walking every instruction.
func (p *structParser) body(fn int, where string) *ValidationError {
	var locals uint64
	if fn < len(p.funcs) && int(p.funcs[fn]) < len(p.types) {
		locals = uint64(p.types[p.funcs[fn]].params)
	}
	groups := p.r.u32()
	if p.r.err != nil {
		return nil
	}
	if int(groups) > len(p.r.b)-p.r.i {
		return refuse("", ErrMalformed, "%s%d local declarations in %d bytes", where, groups, len(p.r.b)-p.r.i)
	}
	for range groups {
		locals += uint64(p.r.u32()) // at most 2^32 groups of 2^32: no overflow in 64 bits
		p.r.byte()
		if ve := p.limit("locals", locals, p.lim.Locals, where); ve != nil {
			return ve
		}
	}
	p.st.Locals = max(p.st.Locals, int(locals))
	return p.code(where)
}

// ctrl is an open block: the operand stack height below it and what its
// end leaves.
type ctrl struct{ base, results, params int }

func (p *structParser) code(where string) *ValidationError {
	stack := []ctrl{{}} // the function's own block; grows by one per nesting level, capped
	h := 0
	pop := func(n int) {
		h = max(h-n, stack[len(stack)-1].base)
	}
	push := func(n int) {
		h += n
		p.st.StackHeight = max(p.st.StackHeight, h)
	}
	for p.r.err == nil && p.r.i < len(p.r.b) {
		if h > p.lim.StackHeight {
			return p.limit("operand stack height (estimated)", uint64(h), p.lim.StackHeight, where)
		}
		op := p.r.byte()
		switch {
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
			if op == 0x04 {
				pop(1)
			}
			params, results, ve := p.blockType(where)
			if ve != nil {
				return ve
			}
			pop(params)
			stack = append(stack, ctrl{base: h, results: results, params: params})
			push(params)
			if ve := p.limit("nesting depth", uint64(len(stack)-1), p.lim.Nesting, where); ve != nil {
				return ve
			}
			p.st.Nesting = max(p.st.Nesting, len(stack)-1)
		case op == 0x05: // else
			c := stack[len(stack)-1]
			h = c.base
			push(c.params)
		case op == 0x0B: // end
			c := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			h = c.base
			if len(stack) == 0 {
				if p.r.i != len(p.r.b) {
					return refuse("", ErrMalformed, "%sbody continues after its end", where)
				}
				return nil
			}
			push(c.results)
		case op == 0x0C: // br
			p.r.u32()
		case op == 0x0D: // br_if
			p.r.u32()
			pop(1)
		case op == 0x0E: // br_table
			n := p.r.u32()
			if ve := p.limit("br_table targets besides the default", uint64(n), p.lim.BrTable, where); ve != nil {
				return ve
			}
			p.st.BrTable = max(p.st.BrTable, int(n))
			for range uint64(n) + 1 {
				p.r.u32()
				if p.r.err != nil {
					break
				}
			}
			pop(1)
		case op == 0x10: // call
			params, results := p.calleeOf(p.r.u32())
			pop(params)
			push(results)
		case op == 0x11: // call_indirect
			t := p.r.u32()
			p.r.u32()
			pop(1)
			if int(t) < len(p.types) {
				pop(p.types[t].params)
				push(p.types[t].results)
			}
		case op == 0x1A:
			pop(1)
		case op == 0x1B:
			pop(2)
		case op == 0x1C: // select t*
			n := p.r.u32()
			if n > 1 {
				return refuse("", ErrMalformed, "%sselect with %d types", where, n)
			}
			p.r.i += int(n)
			pop(2)
		case op == 0x20 || op == 0x23: // local.get, global.get
			p.r.u32()
			push(1)
		case op == 0x21 || op == 0x24: // local.set, global.set
			p.r.u32()
			pop(1)
		case op == 0x22: // local.tee
			p.r.u32()
		case op == 0x25: // table.get
			p.r.u32()
		case op == 0x26: // table.set
			p.r.u32()
			pop(2)
		case op >= 0x28 && op <= 0x35: // loads
			p.r.u32()
			p.r.u32()
		case op >= 0x36 && op <= 0x3E: // stores
			p.r.u32()
			p.r.u32()
			pop(2)
		case op == 0x3F: // memory.size
			p.r.byte()
			push(1)
		case op == 0x40: // memory.grow
			p.r.byte()
		case op == 0x41 || op == 0x42: // i32.const, i64.const
			p.r.sleb()
			push(1)
		case op == 0x43:
			p.r.i += 4
			push(1)
		case op == 0x44:
			p.r.i += 8
			push(1)
		case op >= 0x45 && op <= 0xC4:
			pop(numericPops(op))
		case op == 0xD0: // ref.null t
			p.r.byte()
			push(1)
		case op == 0xD1: // ref.is_null
		case op == 0xD2: // ref.func
			p.r.u32()
			push(1)
		case op == 0xFC:
			if ve := p.miscOp(where, pop, push); ve != nil {
				return ve
			}
		case op == 0xFD:
			if ve := p.simdOp(where, pop, push); ve != nil {
				return ve
			}
		case op == 0x00 || op == 0x01 || op == 0x0F: // unreachable, nop, return
		default:
			return refuse("", ErrMalformed, "%sunknown instruction %#x at offset %d", where, op, p.r.i-1)
		}
	}
	if p.r.err == nil {
		return refuse("", ErrMalformed, "%sbody ends without end", where)
	}
	return nil
}

// numericPops is how many operands a numeric instruction (0x45-0xC4)
// takes beyond the one it gives back: 1 for comparisons and binary
// operators, 0 for tests, unary operators and conversions.
func numericPops(op byte) int {
	switch {
	case op >= 0x46 && op <= 0x4F, op >= 0x51 && op <= 0x66: // comparisons
		return 1
	case op >= 0x6A && op <= 0x78, op >= 0x7C && op <= 0x8A, op >= 0x92 && op <= 0x98, op >= 0xA0 && op <= 0xA6:
		return 1
	}
	return 0
}

func (p *structParser) blockType(where string) (params, results int, ve *ValidationError) {
	if p.r.i >= len(p.r.b) {
		p.r.err = errTruncated
		return 0, 0, nil
	}
	c := p.r.b[p.r.i]
	switch {
	case c == 0x40:
		p.r.i++
		return 0, 0, nil
	case c >= 0x6F && c <= 0x7F: // a value type
		p.r.i++
		return 0, 1, nil
	}
	t := p.r.sleb()
	if t < 0 || t >= int64(len(p.types)) {
		return 0, 0, refuse("", ErrMalformed, "%sblock type %d is not a type", where, t)
	}
	return p.types[t].params, p.types[t].results, nil
}

func (p *structParser) calleeOf(fn uint32) (params, results int) {
	if int(fn) < len(p.funcs) && int(p.funcs[fn]) < len(p.types) {
		t := p.types[p.funcs[fn]]
		return t.params, t.results
	}
	return 0, 0
}

// miscOp decodes a 0xFC instruction: saturating truncation, bulk memory
// and table instructions.
func (p *structParser) miscOp(where string, pop, push func(int)) *ValidationError {
	switch sub := p.r.u32(); {
	case sub <= 7: // trunc_sat
	case sub == 8: // memory.init
		p.r.u32()
		p.r.byte()
		pop(3)
	case sub == 9, sub == 13: // data.drop, elem.drop
		p.r.u32()
	case sub == 10: // memory.copy
		p.r.byte()
		p.r.byte()
		pop(3)
	case sub == 11: // memory.fill
		p.r.byte()
		pop(3)
	case sub == 12, sub == 14: // table.init, table.copy
		p.r.u32()
		p.r.u32()
		pop(3)
	case sub == 15: // table.grow
		p.r.u32()
		p.tableGrown = true
		pop(1)
	case sub == 16: // table.size
		p.r.u32()
		push(1)
	case sub == 17: // table.fill
		p.r.u32()
		pop(3)
	default:
		return refuse("", ErrMalformed, "%sunknown instruction 0xfc %d", where, sub)
	}
	return nil
}

// simdOp decodes a 0xFD (SIMD) instruction. Stack effects are exact for
// the instructions with immediates and an upper bound (pop one, push one)
// for the rest.
func (p *structParser) simdOp(where string, pop, push func(int)) *ValidationError {
	memarg := func() { p.r.u32(); p.r.u32() }
	switch sub := p.r.u32(); {
	case sub <= 10: // loads
		memarg()
	case sub == 11: // v128.store
		memarg()
		pop(2)
	case sub == 12: // v128.const
		p.r.i += 16
		push(1)
	case sub == 13: // i8x16.shuffle
		p.r.i += 16
		pop(1)
	case sub == 14: // swizzle
		pop(1)
	case sub <= 20: // splats
	case sub <= 34: // extract_lane (odd and even mixed): lane immediate
		p.r.byte()
		if isReplaceLane(sub) {
			pop(1)
		}
	case sub == 82: // bitselect
		pop(2)
	case sub >= 35 && sub <= 81 && sub != 77: // comparisons and bitwise binary ops
		pop(1)
	case sub >= 84 && sub <= 87: // load lane
		memarg()
		p.r.byte()
		pop(1)
	case sub >= 88 && sub <= 91: // store lane
		memarg()
		p.r.byte()
		pop(2)
	case sub == 92 || sub == 93: // load zero
		memarg()
	case sub <= 255:
	default:
		return refuse("", ErrMalformed, "%sunknown instruction 0xfd %d", where, sub)
	}
	return nil
}

func isReplaceLane(sub uint32) bool {
	switch sub {
	case 23, 26, 28, 30, 32, 34:
		return true
	}
	return false
}

// sleb reads a signed LEB128 integer of up to 64 bits (i64.const, block
// type indexes).
func (r *leb) sleb() int64 {
	var v int64
	for shift := 0; shift < 70; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= int64(c&0x7f) << shift
		if c&0x80 == 0 {
			if shift+7 < 64 && c&0x40 != 0 {
				v |= -1 << (shift + 7)
			}
			return v
		}
	}
	r.err = fmt.Errorf("integer too long at offset %d", r.i)
	return 0
}

// withoutCustomSections returns the module without its custom sections,
// for wazero to compile (the module's identity stays the hash of all its
// bytes). Custom sections mean nothing to the host, and wazero reads the
// name section: it sized its tables by the counts the section declares
// and kept 24 to 32 bytes per entry for as long as it kept the module
// (2M local names in a 4 MB module: +61 MiB), and it wrote a function's
// name, of any length, into a trap's stack trace once per frame, which
// callError then cut to its first line (a 3.9 MB name: 0.7 s and +447 MiB
// for one trapping call; TestNamesNotKept). Trap messages name functions
// by index instead. b must have passed checkStructure; a module without
// custom sections is returned as is.
func withoutCustomSections(b []byte) []byte {
	var out []byte
	r := &leb{b: b, i: 8}
	for r.i < len(b) {
		start := r.i
		id := r.byte()
		size := r.u32()
		end := r.i + int(size)
		if r.err != nil || end > len(b) || end < r.i {
			return b // checkStructure refuses it; leave it to wazero otherwise
		}
		switch {
		case id != 0 && out != nil:
			out = append(out, b[start:end]...)
		case id == 0 && out == nil:
			out = append(make([]byte, 0, len(b)), b[:start]...)
		}
		r.i = end
	}
	if out == nil {
		return b
	}
	return out
}
