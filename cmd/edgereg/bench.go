package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/broker"
	"github.com/edgereg/edgereg/wire/client"
)

// benchFlags are the load generator's parameters.
type benchFlags struct {
	workers, conns    int
	duration, warmup  time.Duration
	topics, groups    int
	topicGroups       int
	queues            int
	brokers           int
	brokerTopics      int
	perRequestStreams bool
	nodePID           int
	spawn             bool
	progress          string
	maxOps            int64
	policy            string
	zone              string
	cpuProfile        string
	execTrace         string
	remotingAddr      string
	stormHold         bool
	perf              perfFlags // refresh and watch (bench_perf.go)
}

// benchResult is one workload's outcome.
type benchResult struct {
	Workload   string  `json:"workload"`
	Ops        int64   `json:"ops"`
	Errors     int64   `json:"errors"`
	Seconds    float64 `json:"seconds"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	NodeCPUSec float64 `json:"node_cpu_s,omitempty"`
	CPUPerOpUs float64 `json:"node_cpu_us_per_op,omitempty"`
	// Refresh: topic routes answered per second and node CPU per topic.
	TopicRoutesPerSec float64 `json:"topic_routes_per_sec,omitempty"`
	CPUPerTopicUs     float64 `json:"node_cpu_us_per_topic,omitempty"`
	// Watch: change to delivery at the last watcher of each change.
	LastP50Ms float64 `json:"last_delivery_p50_ms,omitempty"`
	LastP99Ms float64 `json:"last_delivery_p99_ms,omitempty"`
	// Storm: redials, in total and by what made the broker redial.
	Redials      int64            `json:"redials,omitempty"`
	RedialCauses map[string]int64 `json:"redial_causes,omitempty"`
	// Storm, for a local node: its resident memory once every broker is
	// registered (with --storm-hold, while their connections are still
	// open) and its peak resident memory so far, in MiB.
	NodeRSSMiB     float64 `json:"node_rss_mib,omitempty"`
	NodePeakRSSMiB float64 `json:"node_peak_rss_mib,omitempty"`
	Note           string  `json:"note,omitempty"`
}

func newBenchCmd(g *globals) *cobra.Command {
	bf := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "bench WORKLOAD...",
		Short: "Generate load against nodes: route, refresh, register, heartbeat, watch, storm",
		Long: `Generate load and report ops/s, p50, p99, errors and, for a local node, its CPU
time per operation. Workloads:

  route      workers read random routes of --topics topics spread over --groups groups
  refresh    workers poll the --refresh-topics routes they hold, one request, all
             unchanged; reports topic routes/s
  register   --brokers brokers with --broker-topics topics each, re-sent in full
  heartbeat  --brokers brokers heartbeating on their session streams
  watch      --watchers streams watch --watch-topics topics whose routes change
             --change-rate times a second; reports change-to-delivery latency (from
             just before the changing request is sent to the moment the stream's read
             goroutine has read the event frame, before its body is decoded), the same
             to the last watcher of each change, and deliveries/s (ops are deliveries)
  storm      --brokers brokers connect and register at once; reports time to all registered
  remoting-route  the route workload in RocketMQ remoting (GET_ROUTEINFO_BY_TOPIC): to the
             node's remoting listener, then through a gateway's cache in front of it

By default each workload runs against a fresh node that bench starts as a child
process (so its CPU can be measured); --spawn=false uses --nodes instead, with
--node-pid naming a local node's process for CPU figures.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, workloads []string) error {
			for _, w := range workloads {
				if !slices.Contains([]string{"route", "refresh", "register", "heartbeat", "watch", "storm", "remoting-route"}, w) {
					return usageError{fmt.Errorf("unknown workload %q: use route, refresh, register, heartbeat, watch, storm or remoting-route", w)}
				}
			}
			return runBench(cmd, g, bf, workloads)
		},
	}
	f := cmd.Flags()
	f.IntVar(&bf.workers, "workers", 32, "concurrent workers (closed loop)")
	f.IntVar(&bf.conns, "conns", 4, "connections the workers share")
	f.DurationVar(&bf.duration, "duration", 10*time.Second, "measured time per workload")
	f.DurationVar(&bf.warmup, "warmup", 3*time.Second, "unmeasured time before it")
	f.IntVar(&bf.topics, "topics", 1000, "topics for the route workload")
	f.IntVar(&bf.groups, "groups", 8, "broker groups for the route workload")
	f.IntVar(&bf.topicGroups, "topic-groups", 2, "groups each topic lives on")
	f.IntVar(&bf.queues, "queues", 8, "read and write queues per topic")
	f.IntVar(&bf.brokers, "brokers", 200, "brokers for register, heartbeat and storm")
	f.IntVar(&bf.brokerTopics, "broker-topics", 100, "topics per broker for register and storm")
	f.BoolVar(&bf.perRequestStreams, "stream-per-request", false, "open a stream per request instead of one long-lived stream per worker")
	f.IntVar(&bf.nodePID, "node-pid", 0, "process id of a local node, to measure its CPU (with --spawn=false)")
	f.BoolVar(&bf.spawn, "spawn", true, "start a fresh local node for each workload")
	f.StringVar(&bf.progress, "progress", "auto", "progress line: auto (on a terminal), on or off")
	f.Int64Var(&bf.maxOps, "max-ops", 50_000_000, "stop a workload after this many operations")
	f.StringVar(&bf.policy, "policy", "", "route workload: push this module as the route policy first")
	f.StringVar(&bf.cpuProfile, "cpuprofile", "", "write the load generator's own CPU profile to this file")
	f.StringVar(&bf.execTrace, "trace", "", "write the load generator's own execution trace to this file (go tool trace)")
	f.StringVar(&bf.zone, "zone", "", "route workload: the zone clients send (groups alternate zone-0 and zone-1)")
	f.StringVar(&bf.remotingAddr, "remoting-addr", "", "remoting-route with --spawn=false: the node's remoting listener, host:port")
	f.BoolVar(&bf.stormHold, "storm-hold", false, "storm: brokers keep their connections open until all are registered, as a fleet does, so the node's memory is measured holding them")
	addPerfFlags(f, &bf.perf)
	return cmd
}

func runBench(cmd *cobra.Command, g *globals, bf *benchFlags, workloads []string) error {
	if bf.cpuProfile != "" {
		f, err := os.Create(bf.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if bf.execTrace != "" {
		f, err := os.Create(bf.execTrace)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	var results []benchResult
	for _, w := range workloads {
		if w == "remoting-route" {
			rs, err := benchRemotingRoute(cmd, g, bf)
			if err != nil {
				return fmt.Errorf("%s: %w", w, err)
			}
			results = append(results, rs...)
			continue
		}
		res, err := benchOne(cmd, g, bf, w)
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		results = append(results, res)
	}
	return g.emit(cmd.OutOrStdout(), results, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "WORKLOAD\tOPS/S\tP50 MS\tP99 MS\tERRORS\tNODE CPU US/OP\tNOTE")
		for _, r := range results {
			cpu := "-"
			if r.CPUPerOpUs > 0 {
				cpu = fmt.Sprintf("%.1f", r.CPUPerOpUs)
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%.3f\t%.3f\t%d\t%s\t%s\n", r.Workload, r.OpsPerSec, r.P50Ms, r.P99Ms, r.Errors, cpu, r.Note)
		}
	})
}

// benchTarget is where a workload sends its load.
type benchTarget struct {
	addr string
	pid  int
	tls  *tls.Config
	stop func()
	dir  string // a spawned node's data directory, with its local CA
}

func benchOne(cmd *cobra.Command, g *globals, bf *benchFlags, workload string) (benchResult, error) {
	tgt, err := startTarget(g, bf)
	if err != nil {
		return benchResult{}, err
	}
	defer tgt.stop()
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	if workload == "storm" {
		return runStorm(ctx, tgt, bf)
	}
	if run := perfWorkloads[workload]; run != nil {
		return run(ctx, cmd.ErrOrStderr(), tgt, bf)
	}
	conns, err := dialN(ctx, tgt, bf.conns)
	if err != nil {
		return benchResult{}, err
	}
	defer closeAll(conns)
	op, note, err := prepareWorkload(ctx, workload, conns[0], bf)
	if err != nil {
		return benchResult{}, fmt.Errorf("prepare: %w", err)
	}
	res := measure(ctx, cmd.ErrOrStderr(), workload, tgt, conns, bf, op)
	res.Note = note
	return finishWorkload(workload, res, bf), nil
}

// startTarget starts a fresh node, or points at the given one.
func startTarget(g *globals, bf *benchFlags, extraNodeArgs ...string) (*benchTarget, error) {
	if !bf.spawn {
		conf, err := g.clientTLS()
		if err != nil {
			return nil, err
		}
		nodes, err := g.nodeList()
		if err != nil {
			return nil, err
		}
		return &benchTarget{addr: nodes[0], pid: bf.nodePID, tls: conf, stop: func() {}}, nil
	}
	dir, err := os.MkdirTemp("", "edgereg-bench")
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// Every simulated broker and client dials from this one address, where a
	// real fleet comes from many: the per-address limits follow the load
	// asked for, or a storm would measure the node refusing one address.
	// --max-conns is twice the load, as the README advises sizing it for a
	// fleet, so all of it connecting at once is not asked for Retries.
	conns := bf.brokers + bf.conns + 16
	args := append([]string{"node", "--data", dir, "--addr", addr, "--admin-addr", "off", "--warm-up", "-1s",
		"--max-conns-per-host", strconv.Itoa(max(conns, 64)),
		"--max-broker-conns-per-host", strconv.Itoa(max(conns, node.DefaultMaxBrokerConnsPerHost)),
		"--max-broker-conns-per-identity", strconv.Itoa(max(conns, node.DefaultMaxBrokerConnsPerIdentity)), // one certificate for every simulated broker
		"--max-handshakes-per-host", strconv.Itoa(max(conns, node.DefaultMaxHandshakesPerHost)),
		"--max-watches", strconv.Itoa(max(4*bf.perf.watchers*bf.perf.watchTopics, node.DefaultMaxWatches)), // one address's share is a quarter
		"--max-conns", strconv.Itoa(max(2*conns, node.DefaultMaxConns)), "--log-format", "json", "--log-level", "warn"}, extraNodeArgs...)
	child := exec.Command(self, args...)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		return nil, err
	}
	tgt := &benchTarget{addr: addr, pid: child.Process.Pid, dir: dir, stop: func() {
		child.Process.Signal(os.Interrupt)
		child.Wait()
		os.RemoveAll(dir)
	}}
	local := &globals{data: dir}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if tgt.tls, err = local.clientTLS(); err == nil {
			if c, err := client.Dial(context.Background(), addr, client.Config{TLS: tgt.tls}); err == nil {
				c.Close()
				return tgt, nil
			}
		}
		if time.Now().After(deadline) {
			tgt.stop()
			return nil, fmt.Errorf("bench node did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeAddr() (string, error) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.LocalAddr().String(), nil
}

func dialN(ctx context.Context, tgt *benchTarget, n int) ([]*client.Conn, error) {
	conns := make([]*client.Conn, 0, n)
	for range n {
		c, err := client.Dial(ctx, tgt.addr, client.Config{TLS: tgt.tls})
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func closeAll(conns []*client.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// benchOp is one operation of a workload: worker w, using its caller.
type benchOp func(ctx context.Context, call caller, w int, rng *rand.Rand) error

// caller sends one request, on a long-lived stream or a stream of its own.
type caller func(ctx context.Context, t wire.Type, req, resp any) error

func prepareWorkload(ctx context.Context, workload string, c *client.Conn, bf *benchFlags) (benchOp, string, error) {
	switch workload {
	case "route":
		return prepareRoute(ctx, c, bf)
	case "register":
		regs := benchBrokers(bf.brokers, bf.brokerTopics, bf.queues)
		size, _ := wire.Marshal(regs[0])
		var counter atomic.Uint64
		return func(ctx context.Context, call caller, _ int, rng *rand.Rand) error {
			r := *regs[rng.IntN(len(regs))]
			r.DataVersion.Counter = counter.Add(1) // a changed version: every topic is compared
			return call(ctx, wire.TypeRegister, &r, &wire.RegisterAck{})
		}, fmt.Sprintf("%d-byte registrations", len(size)), nil
	case "heartbeat":
		return prepareHeartbeat(ctx, c, bf)
	case "refresh":
		return prepareRefresh(ctx, c, bf)
	}
	return nil, "", fmt.Errorf("unknown workload %s", workload)
}

func prepareRoute(ctx context.Context, c *client.Conn, bf *benchFlags) (benchOp, string, error) {
	perGroup := make([][]wire.TopicConfig, bf.groups)
	names := make([]string, bf.topics)
	for i := range bf.topics {
		names[i] = fmt.Sprintf("rmq_bench_topic_%04d", i)
		for k := range min(bf.topicGroups, bf.groups) {
			g := (i + k) % bf.groups
			perGroup[g] = append(perGroup[g], wire.TopicConfig{Name: names[i], ReadQueues: uint32(bf.queues), WriteQueues: uint32(bf.queues), Perm: 6})
		}
	}
	for g := range bf.groups {
		for id := range int64(2) {
			reg := &wire.Register{Cluster: "BenchCluster", BrokerName: fmt.Sprintf("broker-%d", g), BrokerID: id,
				Addr: fmt.Sprintf("10.0.%d.%d:10911", g, id), DataVersion: wire.DataVersion{Counter: 1},
				Zone:   fmt.Sprintf("zone-%d", g%2),
				Topics: perGroup[g], HeartbeatTimeoutMs: uint64(time.Hour.Milliseconds())}
			if _, err := c.Register(ctx, reg); err != nil {
				return nil, "", err
			}
		}
	}
	note := ""
	if bf.policy != "" {
		module, err := readModuleFile(bf.policy)
		if err != nil {
			return nil, "", err
		}
		info, err := c.PolicyPush(ctx, "route", module)
		if err != nil {
			return nil, "", err
		}
		note = fmt.Sprintf(", route policy %.12s", info.Hash)
	}
	attrs := wire.ClientAttrs{Zone: bf.zone}
	rs, err := c.GetRoutes(ctx, &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: names[0]}}, Client: attrs})
	if err != nil {
		return nil, "", err
	}
	// Each worker keeps its query and its answer between calls, as a
	// client polling in a loop would: the answer is still decoded in
	// full every call, into arrays DecodeRoutes reuses.
	type routeState struct {
		topic [1]wire.TopicVersion
		q     wire.GetRoutes
		out   wire.Routes
	}
	states := make([]routeState, bf.workers)
	return func(ctx context.Context, call caller, w int, rng *rand.Rand) error {
		ws := &states[w]
		ws.topic[0] = wire.TopicVersion{Topic: names[rng.IntN(len(names))]}
		ws.q = wire.GetRoutes{Topics: ws.topic[:], Client: attrs}
		if err := call(ctx, wire.TypeGetRoutes, &ws.q, &ws.out); err != nil {
			return err
		}
		if len(ws.out.Results) != 1 || ws.out.Results[0].Status != wire.StatusOK || ws.out.Results[0].Topic != ws.topic[0].Topic {
			return errors.New("route not found")
		}
		return nil
	}, fmt.Sprintf("%d-byte routes%s", len(rs.Results[0].Route), note), nil
}

func prepareHeartbeat(ctx context.Context, c *client.Conn, bf *benchFlags) (benchOp, string, error) {
	regs := benchBrokers(bf.brokers, 1, bf.queues)
	beats := make([]wire.Heartbeat, len(regs))
	for i, r := range regs {
		ack, err := c.Register(ctx, r)
		if err != nil {
			return nil, "", err
		}
		beats[i] = wire.Heartbeat{Cluster: r.Cluster, Addr: r.Addr, Epoch: ack.Lease.Epoch, DataVersion: r.DataVersion}
	}
	size, _ := wire.Marshal(&beats[0])
	return func(ctx context.Context, call caller, _ int, rng *rand.Rand) error {
		return call(ctx, wire.TypeHeartbeat, &beats[rng.IntN(len(beats))], &wire.LeaseAck{})
	}, fmt.Sprintf("%d-byte heartbeats", len(size)), nil
}

// benchBrokers builds n masters, each with its own group and topics.
func benchBrokers(n, topics, queues int) []*wire.Register {
	regs := make([]*wire.Register, n)
	for i := range regs {
		r := &wire.Register{Cluster: "BenchCluster", BrokerName: fmt.Sprintf("bench-broker-%04d", i),
			Addr: fmt.Sprintf("10.1.%d.%d:10911", i/250, i%250), HAAddr: fmt.Sprintf("10.1.%d.%d:10912", i/250, i%250),
			DataVersion: wire.DataVersion{Counter: 1}, HeartbeatTimeoutMs: uint64(time.Hour.Milliseconds())}
		for t := range topics {
			r.Topics = append(r.Topics, wire.TopicConfig{Name: fmt.Sprintf("bench_topic_%04d_%03d", i, t),
				ReadQueues: uint32(queues), WriteQueues: uint32(queues), Perm: 6})
		}
		regs[i] = r
	}
	return regs
}

// measure runs op in a closed loop on every worker: a warm-up, then the
// measured window.
func measure(ctx context.Context, progressOut io.Writer, workload string, tgt *benchTarget, conns []*client.Conn, bf *benchFlags, op benchOp) benchResult {
	res, _ := measureLoop(ctx, progressOut, workload, bf, func() []float64 { return []float64{procCPU(tgt.pid)} },
		func(ctx context.Context, w int, l *closedLoop) []time.Duration {
			return runWorker(ctx, conns[w%len(conns)], bf, w, op, l)
		})
	return res
}

// closedLoop counts one run's calls: the ops and errors of the measured
// window, and whether the window is open.
type closedLoop struct {
	measuring atomic.Bool
	ops, errs atomic.Int64
}

// run calls op until ctx ends: a failed call counts as an error, the
// others as ops, timed while the window is open.
func (l *closedLoop) run(ctx context.Context, op func() error) []time.Duration {
	var lat []time.Duration
	for ctx.Err() == nil {
		t0 := time.Now()
		err := op()
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			l.errs.Add(1)
			continue
		}
		l.ops.Add(1)
		if l.measuring.Load() {
			lat = append(lat, time.Since(t0))
		}
	}
	return lat
}

// measureLoop runs worker on bf.workers goroutines (each calls through
// the loop it is given), waits out the warm-up, then measures a window of
// bf.duration or bf.maxOps ops. cpus reads the CPU seconds of the processes
// measured: the result's CPU is the first one's, and the second value is
// every process's CPU over the window.
func measureLoop(ctx context.Context, progressOut io.Writer, workload string, bf *benchFlags, cpus func() []float64,
	worker func(ctx context.Context, w int, l *closedLoop) []time.Duration) (benchResult, []float64) {
	var l closedLoop
	lat := make([][]time.Duration, bf.workers)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range bf.workers {
		wg.Go(func() { lat[w] = worker(runCtx, w, &l) })
	}
	stopProgress := startProgress(progressOut, bf.progress, workload, &l.ops, bf.warmup+bf.duration)
	sleepCtx(ctx, bf.warmup)
	l.ops.Store(0)
	l.errs.Store(0)
	cpu0 := cpus()
	l.measuring.Store(true)
	start := time.Now()
	waitUntil(ctx, start.Add(bf.duration), func() bool { return l.ops.Load() >= bf.maxOps })
	l.measuring.Store(false)
	elapsed := time.Since(start)
	cpu := cpus()
	for i := range cpu {
		cpu[i] -= cpu0[i]
	}
	stop()
	wg.Wait()
	stopProgress()
	return summarize(workload, lat, l.ops.Load(), l.errs.Load(), elapsed, cpu[0]), cpu
}

func runWorker(ctx context.Context, c *client.Conn, bf *benchFlags, w int, op benchOp, l *closedLoop) []time.Duration {
	rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
	call := caller(c.CallOnce)
	if !bf.perRequestStreams {
		st, err := c.OpenStream(ctx)
		if err != nil {
			l.errs.Add(1)
			return nil
		}
		defer st.Close()
		call = st.Call
	}
	// Calls run under a context that cannot be cancelled, as the peers'
	// clients use none: a worker stops after its call in flight (bounded
	// by the request timeout), and a call costs no cancellation hook.
	callCtx := context.WithoutCancel(ctx)
	return l.run(ctx, func() error { return op(callCtx, call, w, rng) })
}

func summarize(workload string, lat [][]time.Duration, ops, errs int64, elapsed time.Duration, cpu float64) benchResult {
	all := slices.Concat(lat...)
	slices.Sort(all)
	res := benchResult{Workload: workload, Ops: ops, Errors: errs, Seconds: elapsed.Seconds(),
		OpsPerSec: float64(ops) / elapsed.Seconds(), NodeCPUSec: cpu}
	if len(all) > 0 {
		res.P50Ms = ms(all[len(all)/2])
		res.P99Ms = ms(all[len(all)*99/100])
	}
	if cpu > 0 && ops > 0 {
		res.CPUPerOpUs = cpu / float64(ops) * 1e6
	}
	return res
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// runStorm connects every broker at once, each on its own connection, and
// times until all are registered.
func runStorm(ctx context.Context, tgt *benchTarget, bf *benchFlags) (benchResult, error) {
	regs := benchBrokers(bf.brokers, bf.brokerTopics, bf.queues)
	// The load generator holds every broker's registration (a million
	// topic configs for 10,000 brokers) and churns through a TLS
	// handshake's garbage per broker: at the default GOGC, marking that
	// heap again and again took a sixth of its CPU, which the node on the
	// same cores then lacks. Collect less; the node keeps its default.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	lat := make([]time.Duration, len(regs))
	var errs atomic.Int64
	redials := &stormRedials{}
	held := make([]*client.Conn, len(regs)) // with --storm-hold
	var wg sync.WaitGroup
	cpu0 := procCPU(tgt.pid)
	start := time.Now()
	for i, r := range regs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			c, err := stormBroker(ctx, tgt, r, redials)
			if err != nil {
				errs.Add(1)
				return
			}
			lat[i] = time.Since(t0)
			if bf.stormHold {
				held[i] = c
			} else {
				c.Close()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res := summarize("storm", [][]time.Duration{nonZero(lat)}, int64(len(regs))-errs.Load(), errs.Load(), elapsed, procCPU(tgt.pid)-cpu0)
	res.Redials = redials.total()
	res.RedialCauses = redials.causes()
	res.NodeRSSMiB, res.NodePeakRSSMiB = procRSS(tgt.pid)
	for _, c := range held {
		if c != nil {
			c.Close()
		}
	}
	res.Note = fmt.Sprintf("%d brokers x %d topics registered in %.2f s, %d redials %v", res.Ops, bf.brokerTopics, elapsed.Seconds(), res.Redials, res.RedialCauses)
	if res.NodePeakRSSMiB > 0 {
		res.Note += fmt.Sprintf("; node RSS %.0f MiB (peak %.0f MiB)", res.NodeRSSMiB, res.NodePeakRSSMiB)
		if bf.stormHold {
			res.Note += fmt.Sprintf(" holding %d connections", res.Ops)
		}
	}
	return res, nil
}

// stormAttempts bounds how often one storm broker dials, as a real broker
// retries with backoff when a node sheds load (quic-go refuses connections
// while its accept queue is full).
const stormAttempts = 8

// stormBroker connects and registers one broker, redialling with jittered
// exponential backoff like wire/broker does. It returns the connection the
// broker registered on.
func stormBroker(ctx context.Context, tgt *benchTarget, r *wire.Register, redials *stormRedials) (*client.Conn, error) {
	var err error
	for attempt := range stormAttempts {
		if attempt > 0 {
			redials.add(err)
			sleepCtx(ctx, time.Duration(rand.Int64N(int64(50*time.Millisecond)<<attempt)))
		}
		var c *client.Conn
		if c, err = stormDial(ctx, tgt); err != nil {
			err = stormDialError{err}
			continue
		}
		if _, err = c.Register(ctx, r); err == nil {
			return c, nil
		}
		c.Close()
	}
	return nil, err
}

// stormDial dials as a broker agent's session does: patient for
// broker.DefaultDialTimeout, since a node in a storm queues handshakes.
func stormDial(ctx context.Context, tgt *benchTarget) (*client.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, broker.DefaultDialTimeout)
	defer cancel()
	return client.Dial(ctx, tgt.addr, client.Config{TLS: tgt.tls})
}

func nonZero(ds []time.Duration) []time.Duration {
	out := ds[:0:0]
	for _, d := range ds {
		if d > 0 {
			out = append(out, d)
		}
	}
	return out
}

// procCPU returns a process's user+system CPU seconds from /proc, or 0.
func procCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// procRSS returns a process's resident memory and its peak so far
// (VmRSS, VmHWM) in MiB from /proc, or zeros.
func procRSS(pid int) (rss, peak float64) {
	if pid <= 0 {
		return 0, 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(b)) {
		name, value, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 64)
		if name == "VmRSS" {
			rss = kb / 1024
		} else {
			peak = kb / 1024
		}
	}
	return rss, peak
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func waitUntil(ctx context.Context, deadline time.Time, done func() bool) {
	for time.Now().Before(deadline) && ctx.Err() == nil && !done() {
		sleepCtx(ctx, min(50*time.Millisecond, time.Until(deadline)))
	}
}

// startProgress draws a one-line progress bar on a terminal.
func startProgress(w io.Writer, mode, workload string, ops *atomic.Int64, total time.Duration) func() {
	f, isFile := w.(*os.File)
	if mode == "off" || (mode == "auto" && (!isFile || !isatty.IsTerminal(f.Fd()))) {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprintf(w, "\r\033[K")
				return
			case <-t.C:
				frac := min(float64(time.Since(start))/float64(total), 1)
				bar := strings.Repeat("#", int(frac*30)) + strings.Repeat(".", 30-int(frac*30))
				fmt.Fprintf(w, "\r%-10s [%s] %3.0f%% %d ops", workload, bar, frac*100, ops.Load())
			}
		}
	}()
	return func() { close(done); <-finished }
}
