package gateway_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire/remoting"
)

// TestManyBrokersPastOldLimit: a gateway with default limits registers
// more than 64 brokers with nodes that keep their default admission. Each
// broker's registrar holds a QUIC connection per node with the gateway's
// broker certificate, and a node admits broker-class connections by their
// own per-host budget (1024), not the readers' 64, so the default
// MaxBrokers of 60 was a limit of an older node.
func TestManyBrokersPastOldLimit(t *testing.T) {
	const brokers = 70
	s := startSite(t, 1, nil)
	c := s.dial()
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	for i := range brokers {
		req := request(remoting.RegisterBroker, maps(reg.ExtFields), reg.Body)
		req.ExtFields["brokerName"] = fmt.Sprintf("broker-%03d", i)
		req.ExtFields["brokerAddr"] = "127.0.0.1:" + strconv.Itoa(20000+i)
		if resp := c.call(req); resp.Code != remoting.Success {
			t.Fatalf("broker %d of %d: %d %q", i+1, brokers, resp.Code, resp.Remark)
		}
	}
	tn := s.nodes[0]
	nodetest.WaitFor(t, "every broker's lease on the node", func() bool {
		n := 0
		for i := range brokers {
			if _, ok := s.lease(tn, "127.0.0.1:"+strconv.Itoa(20000+i)); ok {
				n++
			}
		}
		return n == brokers
	})
}
