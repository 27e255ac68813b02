package node

import (
	"fmt"
	"strings"
	"testing"

	"github.com/edgereg/edgereg/node/registry"
)

// TestStatusPageListsBoundedBrokers: the status page refreshes itself every
// 2 s; with every broker of a large fleet on it (brokers are not bounded:
// a broker certificate for any group registers as many as it likes), each
// refresh built and sent megabytes. It lists the first statusBrokerLimit
// brokers and says how many there are, as it does for topics.
func TestStatusPageListsBoundedBrokers(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.AdminAddr = "127.0.0.1:0" })
	const groups = statusBrokerLimit/2 + 10
	for g := range groups {
		for id := range int64(2) {
			reg := registry.Registration{Cluster: fmt.Sprintf("c%d", g%3), BrokerName: fmt.Sprintf("g%04d", g), BrokerID: id,
				Addr: fmt.Sprintf("10.%d.%d.%d:10911", g/250, g%250, id)}
			if _, err := tn.Registry().Register(reg); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := tn.Status()
	listed := 0
	for _, c := range st.Clusters {
		for _, g := range c.Groups {
			listed += len(g.Brokers)
		}
	}
	if listed > statusBrokerLimit || st.BrokerCount != 2*groups {
		t.Fatalf("status lists %d brokers of %d (broker_count %d), want at most %d", listed, 2*groups, st.BrokerCount, statusBrokerLimit)
	}
	_, page := httpGet(t, "http://"+tn.StatusAddr().String()+"/")
	if rows := strings.Count(page, "10911</td>"); rows > statusBrokerLimit || !strings.Contains(page, fmt.Sprintf("Showing the first %d of %d brokers", listed, 2*groups)) {
		t.Fatalf("status page: %d broker rows, and no word of the rest", rows)
	}
}
