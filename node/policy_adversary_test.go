package node

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wasm"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// tagged returns module with a custom section naming tag appended: the
// same code under another SHA-256, so the host takes it for another module.
func tagged(module []byte, tag string) []byte {
	payload := append([]byte{byte(len("tag"))}, "tag"...)
	payload = append(payload, tag...)
	out := append([]byte(nil), module...)
	out = append(out, 0, byte(len(payload))) // custom section, payload < 128 bytes
	return append(out, payload...)
}

// wireCode returns the code of a node's error answer, or 0.
func wireCode(err error) wire.Code {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return 0
}

// TestPushWithSpentInstanceBudgetIsOverloaded: a push whose dry run cannot
// get an instance because the node-wide instance budget is spent is the
// node's load, not the module's fault: code 12 (overloaded, retry), not
// code 1 (the module refused), and nothing changes.
func TestPushWithSpentInstanceBudgetIsOverloaded(t *testing.T) {
	// Dry runs with a deadline no loaded machine misses: the budget, not
	// the time, is what this test is about.
	tn := startNode(t, func(c *Config) { c.PolicyCallTimeout = 5 * time.Second })
	ctx := policyCtx(t)
	op := tn.dial(pki.RoleOperator)
	base := readModule(t, "fixtures/empty-route.wasm")
	host := tn.Node.policies.host
	// Each validated module keeps its dry run's instance: 48 of them hold
	// the whole budget.
	for i := range host.Config().MaxInstances {
		m, err := host.Validate(ctx, tagged(base, fmt.Sprint("held-", i)))
		if err != nil {
			t.Fatalf("module %d: %v", i, err)
		}
		t.Cleanup(func() { m.Close() })
	}
	_, err := op.PolicyPush(ctx, "route", tagged(base, "pushed"))
	if wireCode(err) != wire.CodeOverloaded {
		t.Fatalf("push with the instance budget spent: %v (code %d), want code %d (overloaded)", err, wireCode(err), wire.CodeOverloaded)
	}
	if tn.Node.policies.set.Active(wasm.HookRouteFilter) {
		t.Fatal("a push answered overloaded activated its module")
	}
	_, err = op.PolicyTest(ctx, "route", tagged(base, "tested"), nil)
	if wireCode(err) != wire.CodeOverloaded {
		t.Fatalf("test with the instance budget spent: %v (code %d), want code %d (overloaded)", err, wireCode(err), wire.CodeOverloaded)
	}
}

// TestRefusedUploadsKeepThePreviousModule pushes modules that must be
// refused over a route policy in service: each is answered code 1 with
// the reason (PROTOCOL.md 8.16), and the module in service stays active
// and keeps filtering reads.
func TestRefusedUploadsKeepThePreviousModule(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.MaxPolicyUploadsPerMinute, c.PolicyCallTimeout = 100, 5*time.Second })
	ctx := policyCtx(t)
	op := tn.dial(pki.RoleOperator)
	zonedBrokers(t, op)
	reader := tn.dial(pki.RoleClient)
	good := readModule(t, "fixtures/empty-route.wasm")
	info, err := op.PolicyPush(ctx, "route", good)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string][]byte{
		"truncated":  good[:len(good)/2],
		"garbage":    []byte("\x00asm\x01\x00\x00\x00\xff\xff\xff\xff\xff\xff"),
		"not-wasm":   []byte("#!/bin/sh\nrm -rf /\n"),
		"one-byte":   {0},
		"over-4-MiB": make([]byte, 4<<20+1),
	}
	for _, name := range []string{"abi-version", "import-path-open", "import-sock-accept", "memory-cap"} {
		bad[name] = readModule(t, "hostile/"+name+".wasm")
	}
	for name, b := range bad {
		_, err := op.PolicyPush(ctx, "route", b)
		if wireCode(err) != wire.CodeBadRequest || !strings.Contains(err.Error(), "refused") {
			t.Errorf("%s: push = %v (code %d), want code %d naming the refusal", name, err, wireCode(err), wire.CodeBadRequest)
		}
		if got, _ := groupsOf(t, reader, "zone-1"); len(got) != 0 {
			t.Fatalf("after the refused %s, a read sees %v: the module in service stopped filtering", name, got)
		}
	}
	list, err := op.PolicyList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list {
		if p.Hook == "route" && p.Hash != info.Hash {
			t.Fatalf("route policy %.12s after refused uploads, want %.12s still active", p.Hash, info.Hash)
		}
	}
}
