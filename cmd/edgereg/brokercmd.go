package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/broker"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/routeclient"
)

// nodeSourceFlags choose where the node list comes from.
type nodeSourceFlags struct {
	dns, srv, url string
}

func (f *nodeSourceFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.dns, "nodes-dns", "", "find nodes by DNS A/AAAA records: NAME:PORT (instead of --nodes)")
	cmd.Flags().StringVar(&f.srv, "nodes-srv", "", "find nodes by a DNS SRV record, such as _quic._udp.edgereg.default.svc.cluster.local (instead of --nodes)")
	cmd.Flags().StringVar(&f.url, "nodes-url", "", "find nodes from an HTTP address service returning host:port;host:port (instead of --nodes)")
}

// source returns the node list the flags ask for, re-read periodically by
// the libraries.
func (f *nodeSourceFlags) source(g *globals) (nodes.Source, error) {
	switch countSet(f.dns, f.srv, f.url) {
	case 0:
		list, err := g.nodeList()
		if err != nil {
			return nil, err
		}
		return nodes.Static(list...), nil
	case 1:
	default:
		return nil, usageError{errors.New("give one of --nodes-dns, --nodes-srv and --nodes-url")}
	}
	switch {
	case f.dns != "":
		host, port, err := net.SplitHostPort(f.dns)
		p, perr := strconv.Atoi(port)
		if err != nil || perr != nil {
			return nil, usageError{fmt.Errorf("--nodes-dns %q: want NAME:PORT", f.dns)}
		}
		return nodes.DNS(host, p, nil), nil
	case f.srv != "":
		return nodes.DNSSRV("", "", f.srv, nil), nil
	}
	return nodes.HTTP(f.url, nil), nil
}

func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

type brokerFlags struct {
	id                 broker.Identity
	topics             []string
	fakeTopics         int
	queues             int
	heartbeat, timeout time.Duration
	logFormat          string
	logLevel           string
	src                nodeSourceFlags
}

func newBrokerCmd(g *globals) *cobra.Command {
	bf := &brokerFlags{}
	cmd := &cobra.Command{
		Use:   "broker --cluster C --name B --id N --addr HOST:PORT",
		Short: "Run a broker agent: register with every node, heartbeat, unregister on exit",
		Long: `Run a broker agent until interrupted. It registers the broker and its topics with
every node in parallel, heartbeats, re-registers with a node that restarts or asks
for it, follows changes of the node list, and unregisters from every node on
SIGINT, SIGTERM or SIGHUP; a second signal stops it at once, exit 1, leaving a
node that has not answered to expire the broker. It is a simulator for demos and
tests, and a reference for broker authors (see the wire/broker package).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseAgentSettings(cmd.Flags()); err != nil {
				return usageError{fmt.Errorf("invalid configuration: %w", err)}
			}
			if bf.queues > math.MaxInt32 { // RocketMQ's queue counts are Java ints
				return usageError{fmt.Errorf("invalid configuration: --queues %d: at most %d", bf.queues, math.MaxInt32)}
			}
			return runBroker(cmd, g, bf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&bf.id.Cluster, "cluster", "DefaultCluster", "cluster name")
	f.StringVar(&bf.id.BrokerName, "name", "", "broker group name (required)")
	f.Int64Var(&bf.id.BrokerID, "id", 0, "broker id: 0 for the master, above 0 for slaves")
	f.StringVar(&bf.id.Addr, "addr", "", "the broker's address for producers and consumers, host:port (required)")
	f.StringVar(&bf.id.HAAddr, "ha-addr", "", "where slaves replicate from this broker, host:port")
	f.StringVar(&bf.id.Zone, "zone", "", "the broker's zone, for zone-aware route policies")
	f.BoolVar(&bf.id.ActingMaster, "acting-master", false, "let the lowest-id slave stand in when the group has no master")
	f.StringSliceVar(&bf.topics, "topics", nil, "topics the broker holds, comma separated")
	f.IntVar(&bf.fakeTopics, "fake-topics", 0, "generate this many topics named NAME_topic_00000... instead of --topics")
	f.IntVar(&bf.queues, "queues", 8, "read and write queues per topic")
	f.DurationVar(&bf.heartbeat, "heartbeat-interval", broker.DefaultHeartbeatInterval, "how often each node's lease is renewed")
	f.DurationVar(&bf.timeout, "heartbeat-timeout", 0, "how long nodes keep the lease without a heartbeat (default: the node's)")
	f.StringVar(&bf.logFormat, "log-format", "auto", "log format: auto, text or json")
	f.StringVar(&bf.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	bf.src.add(cmd)
	return cmd
}

func (bf *brokerFlags) topicConfigs() ([]wire.TopicConfig, error) {
	names := bf.topics
	if bf.fakeTopics > 0 {
		if len(bf.topics) > 0 {
			return nil, usageError{errors.New("give --topics or --fake-topics, not both")}
		}
		for i := range bf.fakeTopics {
			names = append(names, fmt.Sprintf("%s_topic_%05d", bf.id.BrokerName, i))
		}
	}
	out := make([]wire.TopicConfig, 0, len(names))
	for _, n := range names {
		if err := wire.ValidTopicName(n); err != nil {
			return nil, usageError{err}
		}
		out = append(out, wire.TopicConfig{Name: n, ReadQueues: uint32(bf.queues), WriteQueues: uint32(bf.queues),
			Perm: wire.PermRead | wire.PermWrite})
	}
	return out, nil
}

func runBroker(cmd *cobra.Command, g *globals, bf *brokerFlags) error {
	if bf.id.BrokerName == "" || bf.id.Addr == "" {
		return usageError{errors.New("--name and --addr are required")}
	}
	topics, err := bf.topicConfigs()
	if err != nil {
		return err
	}
	logger, err := newLogger(os.Stderr, bf.logFormat, bf.logLevel, cmd.Flags())
	if err != nil {
		return usageError{err}
	}
	src, err := bf.src.source(g)
	if err != nil {
		return err
	}
	conf, err := g.clientTLS()
	if err != nil {
		return err
	}
	r, err := broker.New(broker.Config{
		Identity: bf.id, Topics: topics, Nodes: src, TLS: conf,
		HeartbeatInterval: bf.heartbeat, HeartbeatTimeout: bf.timeout, Logger: logger,
	})
	if err != nil {
		return usageError{err}
	}
	// The first signal stops the agent, which unregisters from every node
	// (each bounded by the request timeout); a second one, from an
	// operator who will not wait for a node gone quiet, ends it at once.
	ctx, now, release := stopOnSignals(cmd.Context())
	defer release()
	unlog := context.AfterFunc(ctx, func() { logger.Info("broker agent stopping: unregistering from every node") })
	logger.Info("broker agent starting", "cluster", bf.id.Cluster, "broker", bf.id.BrokerName, "id", bf.id.BrokerID,
		"addr", bf.id.Addr, "topics", len(topics))
	// Run returns the nodes' refusals when every node refused the broker
	// for good (not authorized for its group, invalid, conflict): the
	// agent then exits non-zero with the nodes' messages.
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()
	select {
	case err = <-ran:
		unlog() // ended by the nodes' refusals, or stopped: not to be said at release
	case <-now.Done():
		logger.Warn("second signal: stopping now, without waiting for every node to unregister the broker")
		return fmt.Errorf("broker %s: %w (a node that missed the unregistration routes to it until its lease runs out)", bf.id.BrokerName, errSecondSignal)
	}
	if errors.Is(err, broker.ErrRefused) {
		return fmt.Errorf("broker %s refused by every node: %w", bf.id.BrokerName, err)
	}
	if !slices.ContainsFunc(r.Nodes(), func(n broker.NodeState) bool { return n.Epoch != 0 }) {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		logger.Warn("broker agent stopped: no node had registered the broker")
		return nil
	}
	if err != nil {
		// Whatever the cause (a node down, a deadline, a canceled dial),
		// some node still holds the broker until its lease runs out.
		return fmt.Errorf("broker %s stopped but not unregistered from every node (a node that missed it routes to it until its lease runs out): %w", bf.id.BrokerName, err)
	}
	logger.Info("broker agent stopped: unregistered")
	return nil
}

// runWatch prints every change of the watched topics until interrupted.
func runWatch(cmd *cobra.Command, g *globals, src nodes.Source, topics []string, attrs wire.ClientAttrs, fanout int) error {
	conf, err := g.clientTLS()
	if err != nil {
		return err
	}
	rc, err := routeclient.New(routeclient.Config{Nodes: src, TLS: conf, Attrs: attrs, Fanout: fanout,
		Logger: discardLogger()})
	if err != nil {
		return usageError{err}
	}
	defer rc.Close()
	ctx, stop := signal.NotifyContext(cmd.Context(), stopSignals...)
	defer stop()
	updates, err := rc.Watch(ctx, topics...)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	enc := json.NewEncoder(out)
	for u := range updates {
		if g.output == "json" {
			r := newRouteOut(u.Topic, u.Version, "", u.Route)
			enc.Encode(watchLine{Time: time.Now().UTC(), Topic: u.Topic, Version: r.Version, Gone: u.Gone, Queues: r.Queues, BrokerGroups: r.BrokerGroups})
			continue
		}
		tablef(out, "%s %s %s\n", time.Now().Format(time.TimeOnly), u.Topic, describeUpdate(u))
	}
	return nil
}

type watchLine struct {
	Time    time.Time `json:"time"`
	Topic   string    `json:"topic"`
	Version string    `json:"version"`
	Gone    bool      `json:"gone"`
	// The route, named as in `route -o json`.
	Queues       []node.StatusQueue `json:"queues"`
	BrokerGroups []groupOut         `json:"broker_groups"`
}

// describeUpdate renders an update on one line: each group with its queues,
// permission and master address.
func describeUpdate(u routeclient.Update) string {
	if u.Gone {
		return "gone: no broker holds it"
	}
	if len(u.Route.Queues) == 0 { // a route policy left this client no broker
		return fmt.Sprintf("version %016x: no brokers for this client", u.Version)
	}
	var parts []string
	for _, q := range u.Route.Queues {
		addr := ""
		for _, b := range u.Route.Brokers {
			if b.Name == q.BrokerName {
				addr = b.Addrs[wire.MasterID]
			}
		}
		parts = append(parts, fmt.Sprintf("%s(%d/%d %s %s)", q.BrokerName, q.ReadQueues, q.WriteQueues, wire.PermString(q.Perm), addr))
	}
	return fmt.Sprintf("version %016x: %s", u.Version, strings.Join(parts, " "))
}
