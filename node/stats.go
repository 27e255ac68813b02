package node

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/edgereg/edgereg/wire"
)

// stats are the node's metrics. Each node has its own Prometheus registry,
// so several nodes in one process (tests, embedding) do not collide. The
// hot paths use pre-resolved children, never a label lookup per request.
type stats struct {
	reg *prometheus.Registry

	conns   atomic.Int64 // also read by tests and the status page
	streams atomic.Int64

	registrations prometheus.Counter
	heartbeats    prometheus.Counter
	expiries      *prometheus.CounterVec
	badFrames     prometheus.Counter
	denied        *prometheus.CounterVec // by role and kind
	refused       *prometheus.CounterVec // connections, by reason
	replaced      prometheus.Counter
	tlsFailures   *prometheus.CounterVec // by reason
	validations   prometheus.Counter     // Retries asked (admission.verifySource)
	timeouts      prometheus.Counter
	routeReads    [5]prometheus.Counter   // by wire.RouteStatus
	latency       [64]prometheus.Observer // by wire.Type: an index, not a map lookup, per request
	errors        *prometheus.CounterVec
	panics        *prometheus.CounterVec
}

// routeResultLabels name route read results as the metrics show them.
var routeResultLabels = [5]string{
	wire.StatusOK: "hit", wire.StatusNotModified: "not_modified",
	wire.StatusNotFound: "not_found", wire.StatusWarmingUp: "warming_up",
	wire.StatusPolicyFailed: "policy_failed",
}

func newStats(n *Node) *stats {
	s := &stats{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { s.reg.MustRegister(c) }
	s.registrations = prometheus.NewCounter(prometheus.CounterOpts{Name: "edgereg_registrations_total", Help: "Full broker registrations accepted."})
	s.heartbeats = prometheus.NewCounter(prometheus.CounterOpts{Name: "edgereg_heartbeats_total", Help: "Heartbeats accepted."})
	s.expiries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgereg_expiries_total", Help: "Brokers removed, by reason."}, []string{"reason"})
	s.badFrames = prometheus.NewCounter(prometheus.CounterOpts{Name: "edgereg_bad_frames_total", Help: "Malformed, oversized or unknown frames."})
	s.denied = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgereg_requests_denied_total", Help: "Requests refused as not authorized, by the peer's role and the request's kind."}, []string{"role", "kind"})
	s.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgereg_connections_refused_total", Help: "Connections refused, by reason: max_conns, handshakes_per_host, conns_per_host, client_share, conns_per_identity, no_identity, handshake_queue."}, []string{"reason"})
	for _, r := range []string{refusedMaxConns, refusedHandshakes, refusedPerHost, refusedClientShare, refusedPerIdentity, refusedNoIdentity, refusedQueue} {
		s.refused.WithLabelValues(r) // present at 0, so alerts see the series
	}
	s.replaced = prometheus.NewCounter(prometheus.CounterOpts{Name: "edgereg_connections_replaced_total", Help: "Connections closed because a newer connection with the same certificate took their slot, or a peer with a certificate took an anonymous peer's."})
	s.tlsFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgereg_tls_handshake_failures_total", Help: "Handshakes that did not complete, by reason: tls (refused certificate or protocol), timeout, closed (the peer closed the connection itself before the handshake ended: a probe, a client giving up), other."}, []string{"reason"})
	for _, r := range []string{"tls", "timeout", "closed", "other"} {
		s.tlsFailures.WithLabelValues(r)
	}
	s.validations = prometheus.NewCounter(prometheus.CounterOpts{Name: "edgereg_address_validations_total", Help: "New peers asked to prove their source address with a QUIC Retry: handshakes in progress reached half of --max-conns, or handshakes have been timing out (what spoofed source addresses cause)."})
	s.timeouts = prometheus.NewCounter(prometheus.CounterOpts{Name: "edgereg_stream_timeouts_total", Help: "Streams cut off by a read or write deadline (reset with 0x20)."})
	s.panics = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgereg_request_panics_total", Help: "Request handlers that panicked (answered with an internal error), by kind."}, []string{"kind"})
	reads := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgereg_route_reads_total", Help: "Route reads by result."}, []string{"result"})
	for st, label := range routeResultLabels {
		s.routeReads[st] = reads.WithLabelValues(label)
	}
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "edgereg_request_duration_seconds", Help: "Time to handle a request, by kind.",
		Buckets: prometheus.ExponentialBuckets(10e-6, 4, 9), // 10 µs .. 655 ms
	}, []string{"kind"})
	for t := range wire.Type(len(s.latency)) {
		if t.Known() {
			s.latency[t] = lat.WithLabelValues(t.String())
			s.panics.WithLabelValues(t.String()) // present at 0: the first panic is an increase
		}
	}
	s.errors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgereg_request_errors_total", Help: "Requests answered with an error, by kind and code."}, []string{"kind", "code"})
	for _, c := range []prometheus.Collector{s.registrations, s.heartbeats, s.expiries, s.badFrames, s.denied, s.refused, s.replaced, s.tlsFailures, s.validations, s.timeouts, reads, lat, s.errors, s.panics} {
		f(c)
	}
	gauge := func(name, help string, v func() float64) {
		f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, v))
	}
	gauge("edgereg_connections", "Open QUIC connections.", func() float64 { return float64(s.conns.Load()) })
	gauge("edgereg_streams", "Open streams.", func() float64 { return float64(s.streams.Load()) })
	gauge("edgereg_frame_bytes_in_flight", "Bytes of request frames being received (budget: max bytes in flight).", func() float64 {
		return float64(n.inFlight.used.Load() + n.brokerInFlight.used.Load())
	})
	gauge("edgereg_leases", "Live broker leases.", func() float64 { return float64(n.reg.LeaseCount()) })
	gauge("edgereg_topics", "Topics with a route.", func() float64 { return float64(n.reg.TopicCount()) })
	gauge("edgereg_watch_streams", "Streams watching routes.", func() float64 { return float64(n.watches.watchers()) })
	gauge("edgereg_watched_topics", "Topic subscriptions over all watch streams.", func() float64 { return float64(n.watches.subscriptions()) })
	gauge("edgereg_ready", "1 once the warm-up window has passed.", func() float64 {
		if n.WarmingUp() {
			return 0
		}
		return 1
	})
	f(newPolicyCollector(n))
	f(newBuildInfoGauge())
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return s
}

// observe records a handled request.
func (s *stats) observe(t wire.Type, d time.Duration, err *wire.Error) {
	if int(t) < len(s.latency) && s.latency[t] != nil {
		s.latency[t].Observe(d.Seconds())
	}
	if err != nil {
		s.errors.WithLabelValues(t.String(), metricLabel(err.Code.String())).Inc()
	}
}

// countRouteReads counts route read results by status: one counter
// update per status present, not one per topic, for a poll of many.
func (s *stats) countRouteReads(results []wire.RouteResult) {
	if len(results) == 1 {
		s.routeReads[results[0].Status].Inc()
		return
	}
	var counts [len(routeResultLabels)]int
	for i := range results {
		counts[results[i].Status]++
	}
	for st, k := range counts {
		if k > 0 {
			s.routeReads[st].Add(float64(k))
		}
	}
}

// metricLabel spells an error code's name as a label value: snake_case
// ("not found" becomes not_found), the spelling route_reads_total's result
// uses too. Kinds keep the protocol's type names (get-routes).
func metricLabel(name string) string {
	return strings.ReplaceAll(name, " ", "_")
}
