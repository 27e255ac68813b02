package node

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/pki"
)

// TestStatusJSONNames: /status.json uses the CLI's names: snake_case keys,
// the epoch as a decimal string, RFC 3339 times.
func TestStatusJSONNames(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.AdminAddr = "127.0.0.1:0" })
	reg := registration("ClusterJSON", "broker-json-a", 0, "10.9.8.7:10911", "json_topic")
	if _, err := tn.dial(pki.RoleBroker).Register(ctxT(t), reg); err != nil {
		t.Fatal(err)
	}
	_, body := httpGet(t, "http://"+tn.AdminAddr().String()+"/status.json")
	var v any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	snake := regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)*$`)
	var walk func(string, any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !snake.MatchString(k) {
					t.Errorf("/status.json key %s.%s is not snake_case", path, k)
				}
				walk(path+"."+k, x)
			}
		case []any:
			for _, x := range v {
				walk(path+"[]", x)
			}
		}
	}
	walk("", v)
	var st struct {
		Started  string `json:"started"`
		Clusters []struct {
			BrokerGroups []struct {
				Brokers []struct {
					BrokerID int64  `json:"broker_id"`
					Epoch    any    `json:"epoch"`
					Deadline string `json:"deadline"`
				} `json:"brokers"`
			} `json:"broker_groups"`
		} `json:"clusters"`
		Topics []struct {
			Queues []struct {
				BrokerName string `json:"broker_name"`
				PermFlags  string `json:"perm_flags"`
			} `json:"queues"`
		} `json:"topics"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || len(st.Clusters) != 1 || len(st.Topics) != 1 {
		t.Fatalf("status.json = %s (%v)", body, err)
	}
	b := st.Clusters[0].BrokerGroups[0].Brokers[0]
	if _, ok := b.Epoch.(string); !ok {
		t.Errorf("epoch %v (%T) is not a string", b.Epoch, b.Epoch)
	}
	for _, ts := range []string{st.Started, b.Deadline} {
		if _, err := time.Parse(time.RFC3339, ts); err != nil {
			t.Errorf("%q is not RFC 3339", ts)
		}
	}
	if q := st.Topics[0].Queues[0]; q.BrokerName != "broker-json-a" || q.PermFlags == "" {
		t.Errorf("queue = %+v", q)
	}
}
