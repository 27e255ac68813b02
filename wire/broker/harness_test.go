package broker_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/edgereg/edgereg/node/nodetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The package's tests run real nodes from the shared harness.
type (
	testCA   = nodetest.CA
	testNode = nodetest.Node
)

var (
	newTestCA  = nodetest.NewCA
	startNode  = nodetest.Start
	waitFor    = nodetest.WaitFor
	ctxT       = nodetest.Context
	testLogger = nodetest.Logger
)
