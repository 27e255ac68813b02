package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgereg/edgereg/node/kv"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// TestKVConfigIsBounded: the KV config as a whole has a size limit. Before,
// only each value was bounded: one writer (an operator, or anyone with
// --remoting-allow-admin) could grow it until the node's memory or disk ran
// out, every put rewriting and fsyncing the whole file while KV reads and
// remoting broker registrations (which carry ORDER_TOPIC_CONFIG) waited,
// and a namespace past 16 MiB made every remoting REGISTER_BROKER answer
// larger than a broker reads. A put past the limit is refused with code 1,
// a delete still works, and what was accepted survives a restart.
func TestKVConfigIsBounded(t *testing.T) {
	dir := t.TempDir()
	tn := startNodeIn(t, dir, "127.0.0.1:0", nil)
	c := tn.dial(pki.RoleOperator)
	value := strings.Repeat("v", kv.MaxValueLen)
	limit := kv.MaxTotalLen/kv.MaxValueLen + 2 // puts enough to pass the limit
	accepted := 0
	var refusal error
	for i := range limit {
		if err := c.KVPut(ctxT(t), "ns", fmt.Sprintf("k%04d", i), value); err != nil {
			refusal = err
			break
		}
		accepted++
	}
	if refusal == nil {
		t.Fatalf("%d puts of %d bytes (%d MiB in all) accepted, want a refusal past %d MiB",
			accepted, kv.MaxValueLen, accepted*kv.MaxValueLen>>20, kv.MaxTotalLen>>20)
	}
	var we *wire.Error
	if !errors.As(refusal, &we) || we.Code != wire.CodeBadRequest || !strings.Contains(we.Message, "limit") {
		t.Fatalf("put past the limit: %v, want code 1 naming the limit", refusal)
	}
	if _, err := c.KVGet(ctxT(t), "ns", fmt.Sprintf("k%04d", accepted)); err == nil {
		t.Fatal("the refused value was stored")
	}
	// Full, the KV config still shrinks, and then takes a put again.
	if err := c.KVDelete(ctxT(t), "ns", "k0000"); err != nil {
		t.Fatalf("delete in a full KV config: %v", err)
	}
	if err := c.KVPut(ctxT(t), "ns", "small", "x"); err != nil {
		t.Fatalf("put after a delete: %v", err)
	}
	tn.stop()
	tn2 := startNodeIn(t, dir, "127.0.0.1:0", nil)
	m, err := tn2.dial(pki.RoleOperator).KVList(ctxT(t), "ns")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != accepted { // accepted - k0000 + small
		t.Fatalf("after a restart the namespace holds %d keys, want %d", len(m), accepted)
	}
}

// TestDamagedPolicyManifestSaysWhatToDo: a node whose policy manifest is
// damaged refuses to start, as with a damaged KV config or node id, and
// says how to get going again. Before, it said only "unexpected end of
// JSON input".
func TestDamagedPolicyManifestSaysWhatToDo(t *testing.T) {
	dir := t.TempDir()
	tn := startNodeIn(t, dir, "127.0.0.1:0", nil)
	tn.stop()
	path := filepath.Join(dir, "policies", "manifest.json")
	if err := os.WriteFile(path, []byte(`{"version":1,"hoo`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{Addr: "127.0.0.1:0", AdminAddr: AdminOff, DataDir: dir, Logger: quietLogger(),
		PolicyCacheDir: sharedPolicyCache})
	if err == nil {
		t.Fatal("started with a damaged policy manifest")
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move it aside") {
		t.Fatalf("damaged manifest: %v, want its path and what to do", err)
	}
}
