package node

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"runtime"
	"slices"
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

// TestStatusCostIsBoundedByWhatItShows: the page shows the first 500
// topics, but each GET of / or /status.json copied and sorted every topic
// name, under the registry's read lock (registrations wait behind it, and
// route reads behind them): with 100k topics, 10 MB allocated and tens of
// milliseconds of lock per GET, and the page refreshes itself every 2 s in
// every open tab, or as fast as whoever reaches the address asks. A GET
// now keeps only the names it shows.
func TestStatusCostIsBoundedByWhatItShows(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.AdminAddr = "127.0.0.1:0" })
	conn := tn.dial(pki.RoleBroker)
	var names []string
	for b := range 10 {
		topics := make([]string, 10_000)
		for i := range topics {
			topics[i] = fmt.Sprintf("topic-%d-%05d", 9-b, i) // the first names are the last broker's
		}
		names = append(names, topics...)
		if _, err := conn.Register(ctxT(t), registration("c", fmt.Sprintf("g%d", b), 0, fmt.Sprintf("10.0.0.%d:10911", b), topics...)); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(names)
	url := "http://" + tn.AdminAddr().String() + "/status.json"
	var st Status
	least := uint64(math.MaxUint64) // the least of several GETs: nothing else the node does counts
	for range 5 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, body := httpGet(t, url)
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
	}
	if st.TopicCount != len(names) || len(st.Topics) != statusTopicLimit {
		t.Fatalf("status lists %d of %d topics, want %d of %d", len(st.Topics), st.TopicCount, statusTopicLimit, len(names))
	}
	for i, topic := range st.Topics {
		if topic.Name != names[i] {
			t.Fatalf("topic %d is %s, want %s (the first in name order)", i, topic.Name, names[i])
		}
	}
	// A GET of 500 topics (their routes, the JSON, the client reading it)
	// costs 1.5 MB; the copy of 100k names alone was 1.6 MB, and its growth
	// 8 MB more.
	if least > 4<<20 {
		t.Errorf("a GET of /status.json with %d topics allocated %d KB", len(names), least>>10)
	}
}
