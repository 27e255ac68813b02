package routeclient_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
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

// metric reads one sample from the node's admin /metrics page; the node
// must run with an admin address.
func metric(t testing.TB, tn *testNode, name string) uint64 {
	t.Helper()
	addr := tn.Node().AdminAddr()
	if addr == nil {
		t.Fatal("node runs without an admin server")
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return uint64(f)
		}
	}
	return 0 // a labelled sample appears only once counted
}
