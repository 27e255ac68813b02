package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgereg/edgereg/wire/remoting"
)

// metrics are the gateway's own, on a registry of its own (so a process may
// run several gateways, and tests read exact values).
type metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec // by request code and response code
	withheld    *prometheus.CounterVec // answers withheld: no node answered
	routeReads  *prometheus.CounterVec // by result: hit, miss, not_exist, unavailable
	polls       *prometheus.CounterVec // cluster info, topic lists, member groups: hit or miss
	routeEvents prometheus.Counter
}

func newMetrics(g *Gateway) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgereg_gateway_requests_total",
			Help: "Remoting requests by request code (other for codes a NameServer does not know) and the response code answered (none for oneway and withheld answers).",
		}, []string{"code", "response"}),
		withheld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgereg_gateway_withheld_total",
			Help: "Requests left unanswered because no node answered and nothing was cached: the client's timeout keeps its own cached route.",
		}, []string{"code"}),
		routeReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgereg_gateway_route_reads_total",
			Help: "Route reads by result: hit (served from the watched cache), miss (asked the nodes), not_exist, unavailable.",
		}, []string{"result"}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgereg_gateway_polled_reads_total",
			Help: "Cluster info, topic list and member group reads by kind and result (hit or miss).",
		}, []string{"kind", "result"}),
		routeEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgereg_gateway_route_events_total",
			Help: "Route changes pushed into the cache by node watches.",
		}),
	}
	// Present at 0, so an alert's increase() sees the first withheld
	// answer and the first unavailable read (the README names them).
	m.withheld.WithLabelValues(codeLabel(remoting.GetRouteInfoByTopic))
	for _, r := range []string{"hit", "miss", "not_exist", "unavailable"} {
		m.routeReads.WithLabelValues(r)
	}
	m.reg.MustRegister(m.requests, m.withheld, m.routeReads, m.polls, m.routeEvents,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(&stateCollector{g: g,
		up: prometheus.NewDesc("edgereg_gateway_upstream_up",
			"1 when the node answered the gateway's last probe.", []string{"node"}, nil),
		brokers: prometheus.NewDesc("edgereg_gateway_brokers",
			"Brokers the gateway keeps registered.", nil, nil),
		brokerNodes: prometheus.NewDesc("edgereg_gateway_broker_registered_nodes",
			"Nodes that hold the registration of each broker.", []string{"cluster", "addr"}, nil),
		topics: prometheus.NewDesc("edgereg_gateway_cached_topics",
			"Topics whose routes the gateway caches and watches.", nil, nil),
		routeAge: prometheus.NewDesc("edgereg_gateway_route_age_seconds",
			"Seconds since a node last confirmed the least recently confirmed cached route (0 with none): how old a route served may be. While nodes answer it stays within two refresh intervals; while the WAN is cut it grows.", nil, nil),
	})
	return m
}

// stateCollector reads gauges from the gateway's state at scrape time.
type stateCollector struct {
	g                                          *Gateway
	up, brokers, brokerNodes, topics, routeAge *prometheus.Desc
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.brokers
	ch <- c.brokerNodes
	ch <- c.topics
	ch <- c.routeAge
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	// A series whose label the registry refuses (not UTF-8) is left out,
	// rather than failing the whole scrape.
	labelled := func(d *prometheus.Desc, v float64, labels ...string) {
		if m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...); err == nil {
			ch <- m
		}
	}
	for _, s := range c.g.up.states() {
		v := 0.0
		if s.Up {
			v = 1
		}
		labelled(c.up, v, s.Addr)
	}
	bs := c.g.brokers.states()
	ch <- prometheus.MustNewConstMetric(c.brokers, prometheus.GaugeValue, float64(len(bs)))
	for _, b := range bs {
		n := 0
		for _, s := range b.Nodes {
			if s.Registered {
				n++
			}
		}
		labelled(c.brokerNodes, float64(n), b.Cluster, b.Addr)
	}
	ch <- prometheus.MustNewConstMetric(c.topics, prometheus.GaugeValue, float64(c.g.cache.len()))
	age := 0.0
	if t := c.g.cache.oldest(); !t.IsZero() {
		age = time.Since(t).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(c.routeAge, prometheus.GaugeValue, age)
}

func (m *metrics) request(code, response int16) {
	m.requests.WithLabelValues(codeLabel(code), strconv.Itoa(int(response))).Inc()
}

func (m *metrics) requestUnanswered(code int16) {
	m.requests.WithLabelValues(codeLabel(code), "none").Inc()
}

// nameServerCodes are the request codes a NameServer knows (REMOTING.md §2).
var nameServerCodes = map[int16]string{}

func init() {
	for _, c := range []int16{remoting.PutKVConfig, remoting.GetKVConfig, remoting.DeleteKVConfig,
		remoting.RegisterBroker, remoting.UnregisterBroker, remoting.GetRouteInfoByTopic,
		remoting.GetBrokerClusterInfo, remoting.WipeWritePermOfBroker, remoting.GetAllTopicListFromNameSrv,
		remoting.DeleteTopicInNameSrv, remoting.RegisterTopicInNameSrv, remoting.GetKVListByNamespace,
		remoting.GetTopicsByCluster, remoting.GetSystemTopicListFromNS, remoting.GetUnitTopicList,
		remoting.GetHasUnitSubTopicList, remoting.GetHasUnitSubUnunitTopicList, remoting.UpdateNameSrvConfig,
		remoting.GetNameSrvConfig, remoting.QueryDataVersion, remoting.AddWritePermOfBroker,
		remoting.GetBrokerMemberGroup, remoting.BrokerHeartbeat} {
		nameServerCodes[c] = strconv.Itoa(int(c))
	}
}

// codeLabel is a request code's label value: codes a NameServer does not
// know share "other", so a peer cannot grow a series per int16.
func codeLabel(code int16) string {
	if l, ok := nameServerCodes[code]; ok {
		return l
	}
	return "other"
}

// Health is what /healthz reports.
type Health struct {
	// OK holds when some node answered the last probe. While it is false
	// the gateway still serves the routes it caches.
	OK      bool          `json:"ok"`
	Nodes   []NodeState   `json:"nodes"`
	Brokers []BrokerState `json:"brokers"`
	Topics  int           `json:"cached_topics"`
}

// Health reports the gateway's links to the nodes and its brokers.
func (g *Gateway) Health() Health {
	ns := g.up.states()
	h := Health{Nodes: ns, Brokers: g.brokers.states(), Topics: g.cache.len()}
	for _, s := range ns {
		h.OK = h.OK || s.Up
	}
	return h
}

// AdminHandler serves /metrics (Prometheus) and /healthz: 200 while some
// node answers the gateway's probes, 503 when none does, with the state of
// every node and broker as JSON either way.
func (g *Gateway) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := g.Health()
		w.Header().Set("Content-Type", "application/json")
		if !h.OK {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(h)
	})
	return mux
}
