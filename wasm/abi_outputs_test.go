package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/edgereg/edgereg/wire"
)

// lyingModule is a module whose hook answers res (the i64 of ABI.md,
// ptr<<32|len) over out, placed at 64, and whose edgereg_alloc answers
// alloc; body replaces the hook's body when set. It is compiled without a
// dry run, so each answer reaches the host's checks on real calls.
func lyingModule(t *testing.T, h *Host, hook Hook, out []byte, res int64, alloc int32, body string) *Module {
	t.Helper()
	var data strings.Builder
	for _, c := range out {
		fmt.Fprintf(&data, "\\%02x", c)
	}
	if body == "" {
		body = fmt.Sprintf("(i64.const %d)", res)
	}
	src := fmt.Sprintf(`(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param i32) (result i32) (i32.const %d))
  (func (export "edgereg_free") (param i32 i32))
  (data (i32.const 64) "%s")
  (func (export "%s") (param i32 i32) (result i64) %s))`, alloc, data.String(), hook.Export(), body)
	b := wat(t, src)
	if b == nil {
		t.Skip("wat2wasm not installed")
	}
	sum := sha256.Sum256(b)
	m, err := h.compile(context.Background(), hex.EncodeToString(sum[:]), b)
	if err != nil {
		t.Fatalf("compile: %v\n%s", err, src)
	}
	t.Cleanup(func() { m.destroy(context.Background()) }) // destroying twice is harmless
	return m
}

func mustCBOR(t *testing.T, v any) []byte {
	t.Helper()
	b, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// routeOut is a route filter output {1: route}.
func routeOut(t *testing.T, r wire.Route) []byte {
	return mustCBOR(t, &RouteFilterOutput{Route: r})
}

// TestOutputsThatBreakTheABI answers each way a guest can lie about its
// output, on real calls (no dry run in front): every one is an error of
// the call (so a fallback, counted, and an instance discarded), never a
// panic, a read outside the guest's memory or a route the input did not
// allow.
func TestOutputsThatBreakTheABI(t *testing.T) {
	h := newHost(t, HostConfig{})
	in, orig, err := sampleRouteInput()
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := orig.Brokers[0], orig.Brokers[1], orig.Brokers[2]
	qa, qc := orig.Queues[0], orig.Queues[2]
	with := func(f func(*wire.Route)) []byte {
		r := wire.Route{Queues: []wire.QueueData{qa}, Brokers: []wire.BrokerData{a}}
		f(&r)
		return routeOut(t, r)
	}
	ok := routeOut(t, wire.Route{})
	at := func(n int) int64 { return 64<<32 | int64(n) }
	for _, tc := range []struct {
		name  string
		out   []byte
		res   int64 // 0: at(len(out))
		alloc int32 // 0: 1024
		zero  bool  // alloc answers 0
		body  string
		want  error
	}{
		{name: "output past the end of memory", out: ok, res: 0xFFF0<<32 | 0x20, want: ErrBadOutput},
		{name: "output length 2^32-1", out: ok, res: 64<<32 | 0xFFFFFFFF, want: ErrBadOutput},
		{name: "output pointer over 2^31 (negative result)", out: ok, res: -0x7fffffbf00000000 + 7, want: ErrGuest},
		{name: "result -1", out: ok, res: -1, want: ErrGuest},
		{name: "output length 0", out: ok, res: 64 << 32, want: ErrGuest},
		{name: "alloc answers 0", out: ok, zero: true, want: ErrGuest},
		{name: "alloc answers the last byte of memory", out: ok, alloc: 65535, want: ErrBadOutput},
		{name: "alloc answers past memory", out: ok, alloc: -16, want: ErrBadOutput},
		{name: "proc_exit(0) in the hook", out: ok, body: "(call $exit (i32.const 0)) (i64.const 0)", want: ErrTrap},
		{name: "trap in the hook", out: ok, body: "(unreachable)", want: ErrTrap},
		{name: "not CBOR", out: []byte{0xff, 0xff}, want: ErrBadOutput},
		{name: "trailing bytes", out: append(append([]byte{}, ok...), 0), want: ErrBadOutput},
		{name: "duplicate key", out: []byte{0xa2, 0x01, 0xa0, 0x01, 0xa0}, want: ErrBadOutput},
		{name: "indefinite-length map", out: []byte{0xbf, 0x01, 0xa0, 0xff}, want: ErrBadOutput},
		{name: "a tag", out: []byte{0xa1, 0x01, 0xc1, 0xa0}, want: ErrBadOutput},
		{name: "non-UTF-8 broker name", out: []byte{0xa1, 0x01, 0xa1, 0x01, 0x81, 0xa1, 0x01, 0x61, 0xff}, want: ErrBadOutput},
		{name: "route of the wrong type", out: []byte{0xa1, 0x01, 0x61, 'x'}, want: ErrBadOutput},
		{name: "group twice", out: with(func(r *wire.Route) { r.Brokers = append(r.Brokers, a) }), want: ErrBadOutput},
		{name: "queues twice", out: with(func(r *wire.Route) { r.Queues = append(r.Queues, qa) }), want: ErrBadOutput},
		{name: "queues without their group", out: with(func(r *wire.Route) { r.Queues = append(r.Queues, qc) }), want: ErrBadOutput},
		{name: "group with another zone", out: with(func(r *wire.Route) { r.Brokers[0].Zone = b.Zone }), want: ErrBadOutput},
		{name: "group with another cluster", out: with(func(r *wire.Route) { r.Brokers[0].Cluster = "other" }), want: ErrBadOutput},
		{name: "an address the group lacks", out: with(func(r *wire.Route) {
			r.Brokers[0] = c
			r.Brokers[0].Addrs = map[int64]string{0: c.Addrs[1]} // the slave promoted
			r.Queues = nil
		}), want: ErrBadOutput},
		{name: "more read queues", out: with(func(r *wire.Route) { r.Queues[0].ReadQueues++ }), want: ErrBadOutput},
		{name: "a permission bit added", out: with(func(r *wire.Route) {
			r.Brokers[0], r.Queues[0] = c, qc
			r.Queues[0].Perm |= wire.PermWrite
		}), want: ErrBadOutput},
		{name: "system flags changed", out: with(func(r *wire.Route) { r.Queues[0].SysFlag = 1 }), want: ErrBadOutput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, alloc := tc.res, tc.alloc
			if res == 0 {
				res = at(len(tc.out))
			}
			if alloc == 0 && !tc.zero {
				alloc = 1024
			}
			m := lyingModule(t, h, HookRouteFilter, tc.out, res, alloc, tc.body)
			r, err := m.FilterRoute(context.Background(), in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("FilterRoute = %+v, %v; want an error wrapping %q", r, err, tc.want)
			}
		})
	}
	// The subset rules allow taking away: an answer that only removes is
	// accepted, so the cases above fail for what they break.
	for _, out := range [][]byte{ok, with(func(*wire.Route) {}), with(func(r *wire.Route) { r.Queues[0].WriteQueues = 0 })} {
		m := lyingModule(t, h, HookRouteFilter, out, at(len(out)), 1024, "")
		if _, err := m.FilterRoute(context.Background(), in); err != nil {
			t.Errorf("a subset answer refused: %v", err)
		}
		m.destroy(context.Background())
	}
}

// TestThresholdAndConfirmOutputsThatBreakTheABI: thresholds of 0, negative,
// absurd, of the wrong type or missing, and confirm answers naming a lease
// twice, out of range, negative or of the wrong type, are failed calls.
func TestThresholdAndConfirmOutputsThatBreakTheABI(t *testing.T) {
	h := newHost(t, HostConfig{})
	for _, tc := range []struct {
		name string
		out  []byte
	}{
		{"0", []byte{0xa1, 0x01, 0x00}},
		{"-1", []byte{0xa1, 0x01, 0x20}},
		{"-2^63", []byte{0xa1, 0x01, 0x3b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"2^64-1", []byte{0xa1, 0x01, 0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"a float", []byte{0xa1, 0x01, 0xf9, 0x3c, 0x00}},
		{"text", []byte{0xa1, 0x01, 0x61, '1'}},
		{"missing", []byte{0xa0}},
	} {
		m := lyingModule(t, h, HookExpiryThreshold, tc.out, 64<<32|int64(len(tc.out)), 1024, "")
		d, err := m.ExpiryThreshold(context.Background(), sampleThresholdInput(), DefaultMinThreshold, DefaultMaxThreshold)
		if !errors.Is(err, ErrBadOutput) {
			t.Errorf("threshold %s: %v, %v; want an error wrapping %q", tc.name, d, err, ErrBadOutput)
		}
		m.destroy(context.Background()) // its instances go back to the node-wide budget
	}
	for _, tc := range []struct {
		name string
		out  []byte
	}{
		{"an index twice", []byte{0xa1, 0x01, 0x82, 0x00, 0x00}},
		// More indexes than due leases: refused before a set of them is
		// built (a 1 MiB answer of zeros was +22 MiB of heap for the set).
		{"more indexes than due leases", []byte{0xa1, 0x01, 0x84, 0x00, 0x01, 0x02, 0x00}},
		{"an index out of range", []byte{0xa1, 0x01, 0x81, 0x03}},
		{"an index of 2^32", []byte{0xa1, 0x01, 0x81, 0x1b, 0, 0, 0, 1, 0, 0, 0, 0}},
		{"a negative index", []byte{0xa1, 0x01, 0x81, 0x20}},
		{"not an array", []byte{0xa1, 0x01, 0x00}},
		{"missing", []byte{0xa0}},
	} {
		m := lyingModule(t, h, HookExpiryConfirm, tc.out, 64<<32|int64(len(tc.out)), 1024, "")
		idx, err := m.ConfirmExpiry(context.Background(), sampleConfirmInput())
		if !errors.Is(err, ErrBadOutput) {
			t.Errorf("confirm %s: %v, %v; want an error wrapping %q", tc.name, idx, err, ErrBadOutput)
		}
		if tc.name == "more indexes than due leases" && (err == nil || !strings.Contains(err.Error(), "4 indexes for 3 due leases")) {
			t.Errorf("confirm %s: %v, want it refused for its length", tc.name, err)
		}
		m.destroy(context.Background())
	}
}

// TestRouteOutputBoundedByItsInput: a route filter's output is a subset
// of its input route, yet it could be as large as the output cap (1 MiB)
// whatever the route, and decoding 1 MiB of empty broker entries took
// +118 MiB of the node's heap for one call (several run at once) before the
// subset check refused the first entry. An output much larger than the
// route it filters is refused before it is decoded.
func TestRouteOutputBoundedByItsInput(t *testing.T) {
	h := newHost(t, HostConfig{})
	n := 1<<20 - 16 // empty broker entries: one byte each
	b := wat(t, fmt.Sprintf(`(module
  (memory (export "memory") 40)
  (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param i32) (result i32) (i32.const 2000000))
  (func (export "edgereg_free") (param i32 i32))
  (data (i32.const 64) "\a1\01\a1\02\9a\%02x\%02x\%02x\%02x")
  (func (export "edgereg_route_filter") (param i32 i32) (result i64)
    (memory.fill (i32.const 73) (i32.const 0xa0) (i32.const %d))
    (i64.const %d)))`, byte(n>>24), byte(n>>16), byte(n>>8), byte(n), n, 64<<32|int64(9+n)))
	if b == nil {
		t.Skip("wat2wasm not installed")
	}
	sum := sha256.Sum256(b)
	m, err := h.compile(context.Background(), hex.EncodeToString(sum[:]), b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.destroy(context.Background())
	in, _, _ := sampleRouteInput()
	_, err = m.FilterRoute(context.Background(), in)
	t.Logf("a %d-byte output for a %d-byte route: %v", 9+n, len(in.Route), err)
	if !errors.Is(err, ErrBadOutput) || !strings.Contains(err.Error(), "times the input route") {
		t.Fatalf("FilterRoute = %v, want a refusal of the output's size against the route's", err)
	}
}
