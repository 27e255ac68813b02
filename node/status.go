package node

import (
	"encoding/json"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// statusTopicLimit bounds how many topics the status page lists, so a node
// with 100k topics still serves it quickly.
const statusTopicLimit = 500

// statusBrokerLimit bounds how many brokers the status page lists: the
// page refreshes itself every 2 s, and brokers are not bounded.
const statusBrokerLimit = 1000

// Status is what the status page and /status.json show: a read-only
// snapshot of the node. Its JSON uses the CLI's names (snake_case; epochs as
// decimal strings, route versions as hex strings, times RFC 3339), so a
// script reads `edgereg ... -o json` and /status.json alike.
type Status struct {
	NodeID      string          `json:"node_id"`
	Version     string          `json:"version"`
	Addr        string          `json:"addr"`
	Started     time.Time       `json:"started"`
	Now         time.Time       `json:"now"`
	WarmingUp   bool            `json:"warming_up"`
	Connections int64           `json:"connections"`
	Commit      string          `json:"commit"`
	Clusters    []StatusCluster `json:"clusters"`
	Topics      []StatusTopic   `json:"topics"`
	TopicCount  int             `json:"topic_count"`
	LeaseCount  int             `json:"lease_count"` // as node-info and edgereg status show it
	// BrokerCount is how many brokers the groups hold; Clusters lists the
	// first statusBrokerLimit (by cluster, group and id).
	BrokerCount int            `json:"broker_count"`
	Policies    []PolicyStatus `json:"policies"`
}

// StatusCluster is one cluster with its broker groups.
type StatusCluster struct {
	Name   string        `json:"name"`
	Groups []StatusGroup `json:"broker_groups"`
}

// StatusGroup is one broker group with its brokers' leases.
type StatusGroup struct {
	Name    string         `json:"name"`
	Zone    string         `json:"zone,omitempty"`
	Brokers []StatusBroker `json:"brokers"`
}

// StatusBroker is one broker of a group.
type StatusBroker struct {
	ID            int64     `json:"broker_id"`
	Addr          string    `json:"addr"`
	Epoch         uint64    `json:"epoch,string,omitempty"`
	LastHeartbeat time.Time `json:"last_heartbeat,omitzero"`
	Deadline      time.Time `json:"deadline,omitzero"`
	Live          bool      `json:"live"`
}

// StatusTopic is one topic with the groups that hold it.
type StatusTopic struct {
	Name    string        `json:"name"`
	Version string        `json:"version"`
	Queues  []StatusQueue `json:"queues"`
}

// StatusQueue is one broker group's queues of a topic, as /status.json and
// `edgereg route -o json` show them.
type StatusQueue struct {
	BrokerName  string `json:"broker_name"`
	ReadQueues  uint32 `json:"read_queues"`
	WriteQueues uint32 `json:"write_queues"`
	// Perm is RocketMQ's permission bits (6 is read and write); PermFlags
	// spells them as "rw-".
	Perm      uint8  `json:"perm"`
	PermFlags string `json:"perm_flags"`
	SysFlag   uint32 `json:"sys_flag"`
}

// QueueStatus converts a route's queue data for display.
func QueueStatus(q wire.QueueData) StatusQueue {
	return StatusQueue{BrokerName: q.BrokerName, ReadQueues: q.ReadQueues, WriteQueues: q.WriteQueues,
		Perm: q.Perm, PermFlags: wire.PermString(q.Perm), SysFlag: q.SysFlag}
}

// FormatVersion spells a route version as the CLI and /status.json show
// it: 16 hex digits, a string, so no JSON reader rounds it.
func FormatVersion(v uint64) string { return fmt.Sprintf("%016x", v) }

// PolicyStatus describes an active policy module for the status page.
type PolicyStatus struct {
	Hook        string    `json:"hook"`
	Hash        string    `json:"hash"`
	Size        int       `json:"size"`
	ActivatedAt time.Time `json:"activated_at"`
	Calls       uint64    `json:"calls"`
	Errors      uint64    `json:"errors"`
	Fallbacks   uint64    `json:"fallbacks"`
	P50Micros   float64   `json:"p50_us"`
	P99Micros   float64   `json:"p99_us"`
}

// Status returns a snapshot of the node.
func (n *Node) Status() Status {
	now := n.cfg.Clock.Now()
	st := Status{
		NodeID: n.id, Version: Version, Commit: Build().Commit, Addr: n.Addr().String(), Started: n.started.UTC(), Now: now.UTC(),
		WarmingUp: n.WarmingUp(), Connections: n.stats.conns.Load(), TopicCount: n.reg.TopicCount(),
		Policies: n.statusPolicies(), LeaseCount: n.reg.LeaseCount(),
	}
	leases := make(map[string]wire.LeaseInfo)
	for _, l := range n.leases().Leases {
		leases[l.Addr] = l
	}
	ci := n.reg.ClusterInfo()
	listed := 0 // brokers in st.Clusters
	for _, cname := range slices.Sorted(maps.Keys(ci.Clusters)) {
		sc := StatusCluster{Name: cname}
		for _, gname := range ci.Clusters[cname] {
			bd := ci.Groups[gname]
			if room := statusBrokerLimit - listed; room > 0 {
				g := statusGroup(bd, leases, room)
				listed += len(g.Brokers)
				sc.Groups = append(sc.Groups, g)
			}
			st.BrokerCount += len(bd.Addrs)
		}
		if len(sc.Groups) > 0 {
			st.Clusters = append(st.Clusters, sc)
		}
	}
	for _, name := range n.reg.FirstTopics(statusTopicLimit) {
		route, version, err := n.reg.RouteData(name)
		if err != nil {
			continue
		}
		queues := make([]StatusQueue, 0, len(route.Queues))
		for _, q := range route.Queues {
			queues = append(queues, QueueStatus(q))
		}
		st.Topics = append(st.Topics, StatusTopic{Name: name, Version: FormatVersion(version), Queues: queues})
	}
	return st
}

// statusGroup is bd's first max brokers, by id, with their leases.
func statusGroup(bd wire.BrokerData, leases map[string]wire.LeaseInfo, max int) StatusGroup {
	g := StatusGroup{Name: bd.Name, Zone: bd.Zone}
	ids := make([]int64, 0, len(bd.Addrs))
	for id := range bd.Addrs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids[:min(len(ids), max)] {
		b := StatusBroker{ID: id, Addr: bd.Addrs[id]}
		if l, ok := leases[b.Addr]; ok {
			b.Live, b.Epoch = true, l.Epoch
			b.LastHeartbeat, b.Deadline = time.UnixMilli(l.LastHeartbeatMs).UTC(), time.UnixMilli(l.DeadlineMs).UTC()
		}
		g.Brokers = append(g.Brokers, b)
	}
	return g
}

func (a *adminServer) statusJSON(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(a.n.Status())
}

func (a *adminServer) statusPage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	if err := statusTemplate.Execute(w, a.n.Status()); err != nil {
		a.n.log.Error("status page", "err", err)
	}
}

var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"ago":  func(now, t time.Time) string { return now.Sub(t).Round(time.Second).String() + " ago" },
	"in":   func(now, t time.Time) string { return t.Sub(now).Round(time.Second).String() },
	"perm": wire.PermString,
	"brokers": func(st Status) int {
		n := 0
		for _, c := range st.Clusters {
			for _, g := range c.Groups {
				n += len(g.Brokers)
			}
		}
		return n
	},
}).Parse(statusHTML))

// statusHTML is the whole page: no scripts, no external assets; it
// refreshes itself every 2 seconds.
const statusHTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="2">
<title>edgereg node {{.NodeID}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1b1f24;background:#fafafa}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.meta{color:#57606a} table{border-collapse:collapse;background:#fff;min-width:60%}
th,td{border:1px solid #d0d7de;padding:4px 10px;text-align:left} th{background:#f0f3f6}
.live{background:#2e7d32;color:#fff;border-radius:4px;padding:1px 6px}
.gone{background:#b71c1c;color:#fff;border-radius:4px;padding:1px 6px}
.warm{background:#f9a825;border-radius:4px;padding:1px 6px} code{font-size:12px}
</style></head><body>
<h1>edgereg node <code>{{.NodeID}}</code></h1>
<div class="meta">{{.Addr}} &middot; version {{.Version}} &middot; up since {{.Started.Format "2006-01-02 15:04:05 MST"}} &middot;
{{.Connections}} connections &middot; {{.LeaseCount}} leases &middot; {{if .WarmingUp}}<span class="warm">warming up</span>{{else}}ready{{end}}
&middot; <a href="/status.json">status.json</a> (the facts <code>edgereg status</code> compares across nodes)</div>
<h2>Brokers</h2>
{{if .Clusters}}<table><tr><th>cluster</th><th>broker group</th><th>zone</th><th>id</th><th>address</th><th>lease</th><th>last heartbeat</th><th>expires in</th></tr>
{{range $c := .Clusters}}{{range $g := $c.Groups}}{{range $b := $g.Brokers}}<tr><td>{{$c.Name}}</td><td>{{$g.Name}}</td><td>{{$g.Zone}}</td><td>{{$b.ID}}</td><td>{{$b.Addr}}</td>
<td>{{if $b.Live}}<span class="live">live, epoch {{$b.Epoch}}</span>{{else}}<span class="gone">no lease</span>{{end}}</td>
<td>{{if $b.Live}}{{ago $.Now $b.LastHeartbeat}}{{end}}</td><td>{{if $b.Live}}{{in $.Now $b.Deadline}}{{end}}</td></tr>
{{end}}{{end}}{{end}}</table>{{if gt .BrokerCount (brokers .)}}<p class="meta">Showing the first {{brokers .}} of {{.BrokerCount}} brokers; /status.json has the same.</p>{{end}}{{else}}<p>No broker has registered.</p>{{end}}
<h2>Topics ({{.TopicCount}})</h2>
{{if .Topics}}<table><tr><th>topic</th><th>version</th><th>route: broker group (read/write queues, perm)</th></tr>
{{range .Topics}}<tr><td>{{.Name}}</td><td><code>{{.Version}}</code></td><td>{{range .Queues}}{{.BrokerName}} ({{.ReadQueues}}/{{.WriteQueues}}, {{perm .Perm}}) {{end}}</td></tr>
{{end}}</table>{{if gt .TopicCount (len .Topics)}}<p class="meta">Showing the first {{len .Topics}}; /status.json has the same.</p>{{end}}{{else}}<p>No topics.</p>{{end}}
<h2>Policies</h2>
{{if .Policies}}<table><tr><th>hook</th><th>module</th><th>size</th><th>activated</th><th>calls</th><th>errors</th><th>p50</th><th>p99</th></tr>
{{range .Policies}}<tr><td>{{.Hook}}</td><td><code>{{printf "%.12s" .Hash}}</code></td><td>{{.Size}}</td><td>{{.ActivatedAt.Format "2006-01-02 15:04:05 MST"}}</td><td>{{.Calls}}</td><td>{{.Errors}}</td><td>{{printf "%.0f" .P50Micros}} µs</td><td>{{printf "%.0f" .P99Micros}} µs</td></tr>
{{end}}</table>{{else}}<p>No policy is active: routes are unfiltered and thresholds are the defaults.</p>{{end}}
</body></html>
`
