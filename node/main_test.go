package node

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// goroutine a node starts must be stopped by Shutdown.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
