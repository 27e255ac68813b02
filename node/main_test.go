package node

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// sharedPolicyCache is one compilation cache for every node of the tests,
// so a 2 MB policy module is compiled once per run, not once per test
// (compiling under -race on a busy machine takes seconds).
var sharedPolicyCache string

// TestMain fails the package's tests if any goroutine outlives them: every
// goroutine a node starts must be stopped by Shutdown.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "edgereg-node-wasm-cache")
	if err != nil {
		panic(err)
	}
	sharedPolicyCache = dir
	defer os.RemoveAll(dir)
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}
