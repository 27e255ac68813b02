package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/routeclient"
)

// emit prints v as JSON with -o json, or as a table drawn by table.
func (g *globals) emit(w io.Writer, v any, table func(tw *tabwriter.Writer)) error {
	switch g.output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		table(tw)
		return tw.Flush()
	}
	return g.checkOutput()
}

// checkOutput refuses an -o (or EDGEREG_OUTPUT) that is neither table nor
// json, as a usage error.
func (g *globals) checkOutput() error {
	switch g.output {
	case "json", "table", "":
		return nil
	}
	return usageError{fmt.Errorf("-o %q: use table or json", g.output)}
}

func newRouteCmd(g *globals) *cobra.Command {
	var zone string
	var labels []string
	var watch bool
	var wait time.Duration
	var fanout int
	var src nodeSourceFlags
	cmd := &cobra.Command{
		Use:   "route TOPIC... [--watch]",
		Short: "Show where topics live",
		Long: `Show the route of each topic: its queues on every broker group that holds it,
and the addresses of those groups' brokers. --zone and --label are sent to the
node as the client's attributes, so a route policy filters as it would for a
client in that zone. Each read asks --fanout nodes at once and merges their
answers, so a node cut off from some brokers cannot hide them: a topic is "not
found" only when every ready node asked says so. A topic not found, or nodes
still warming up, are asked again for --wait, so a read right after a broker
starts sees its registration.
With --watch it keeps running and prints each change as the node pushes it,
failing over between nodes, until interrupted.`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeTopics(g),
		RunE: func(cmd *cobra.Command, topics []string) error {
			attrs, err := clientAttrs(zone, labels)
			if err != nil {
				return err
			}
			s, err := src.source(g)
			if err != nil {
				return err
			}
			if fanout < 1 {
				return usageError{fmt.Errorf("--fanout %d: ask at least 1 node", fanout)}
			}
			if watch {
				return runWatch(cmd, g, s, topics, attrs, fanout)
			}
			if wait < 0 {
				return usageError{fmt.Errorf("--wait %s: give zero or a positive duration", wait)}
			}
			return runRoute(cmd, g, s, topics, attrs, wait, fanout)
		},
	}
	cmd.Flags().StringVar(&zone, "zone", "", "the client's zone, for route policies")
	cmd.Flags().StringSliceVar(&labels, "label", nil, "client label key=value, for route policies (repeatable)")
	cmd.Flags().BoolVar(&watch, "watch", false, "keep running and print each change as it arrives")
	cmd.Flags().DurationVar(&wait, "wait", 3*time.Second, "keep asking this long while a topic is not found or the nodes warm up (0: answer at once)")
	cmd.Flags().IntVar(&fanout, "fanout", routeclient.DefaultFanout, "how many nodes a read asks at once; their answers are merged, so one partitioned node cannot hide brokers")
	src.add(cmd)
	return cmd
}

func clientAttrs(zone string, labels []string) (wire.ClientAttrs, error) {
	attrs := wire.ClientAttrs{Zone: zone}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return attrs, usageError{fmt.Errorf("--label %q: use key=value", l)}
		}
		if attrs.Labels == nil {
			attrs.Labels = make(map[string]string)
		}
		attrs.Labels[k] = v
	}
	return attrs, nil
}

func runRoute(cmd *cobra.Command, g *globals, src nodes.Source, topics []string, attrs wire.ClientAttrs, wait time.Duration, fanout int) error {
	ctx, cancel, err := g.context(cmd.Context())
	if err != nil {
		return err
	}
	defer cancel()
	conf, err := g.clientTLS()
	if err != nil {
		return err
	}
	var reached answeredBy
	rc, err := routeclient.New(routeclient.Config{Nodes: src, TLS: conf, Attrs: attrs, Fanout: fanout,
		Logger: discardLogger(), OnConnState: reached.note})
	if err != nil {
		return usageError{err}
	}
	defer rc.Close()
	giveUp := time.Now().Add(wait)
	results := make([]routeResult, len(topics))
	for attempt := 0; ; attempt++ {
		readRoutes(ctx, rc, topics, results)
		again := false
		for _, r := range results {
			again = again || errors.Is(r.err, wire.ErrNotFound) || errors.Is(r.err, wire.ErrWarmingUp)
		}
		if !again || !time.Now().Before(giveUp) {
			break
		}
		// Back off from 50 ms to 500 ms: a broker registers within a
		// round trip or two of starting.
		select {
		case <-ctx.Done():
		case <-time.After(min(50*time.Millisecond<<attempt, 500*time.Millisecond)):
		}
		if ctx.Err() != nil {
			break
		}
	}
	out := []routeOut{}
	var missing []string
	var errs []error
	for i, r := range results {
		switch {
		case r.err == nil:
			o := newRouteOut(topics[i], r.version, "", r.route)
			o.Nodes = reached.list()
			out = append(out, o)
		case errors.Is(r.err, wire.ErrNotFound):
			missing = append(missing, topics[i])
		case errors.Is(r.err, routeclient.ErrInvalidTopic):
			return usageError{r.err}
		default:
			errs = append(errs, r.err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	notFound := wire.Errorf(wire.CodeNotFound, "topic %s not found: every ready node asked says so", strings.Join(missing, ", "))
	if len(out) == 0 && len(missing) > 0 {
		// Nothing found: no header alone (nor []) on stdout, as `kv get`
		// of a missing key prints nothing; the error goes to stderr.
		return notFound
	}
	if err := g.emit(cmd.OutOrStdout(), out, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "TOPIC\tBROKER\tREAD\tWRITE\tPERM\tBROKER ID\tADDRESS\tZONE")
		for _, r := range out {
			printRoute(tw, r)
		}
	}); err != nil {
		return err
	}
	if len(missing) > 0 {
		return notFound
	}
	if g.output != "json" {
		fmt.Fprintf(cmd.ErrOrStderr(), "merged from %s\n", strings.Join(reached.list(), ", "))
	}
	return nil
}

// routeResult is one topic's merged route, or why there is none.
type routeResult struct {
	route   wire.Route
	version uint64
	err     error
	found   bool
}

// readRoutes reads, at once, the route of every topic that has none yet
// in results. Each read asks Fanout nodes and merges their answers
// (routeclient, PROTOCOL.md 9.1): a node cut off from some brokers cannot
// hide them, and "not found" means every ready node asked says so.
func readRoutes(ctx context.Context, rc *routeclient.Client, topics []string, results []routeResult) {
	var wg sync.WaitGroup
	for i, t := range topics {
		if results[i].found {
			continue
		}
		wg.Go(func() {
			route, version, err := rc.Route(ctx, t)
			results[i] = routeResult{route: route, version: version, err: err, found: err == nil}
		})
	}
	wg.Wait()
}

// answeredBy collects the nodes a read reached, in the order they did.
type answeredBy struct {
	mu    sync.Mutex
	nodes []string
}

func (a *answeredBy) note(ev routeclient.ConnEvent) {
	if ev.State != routeclient.StateConnected {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Contains(a.nodes, ev.Node) {
		a.nodes = append(a.nodes, ev.Node)
	}
}

func (a *answeredBy) list() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.nodes)
}

func printRoute(tw io.Writer, r routeOut) {
	if len(r.Queues) == 0 { // a route policy left this client no broker
		tablef(tw, "%s\t(no brokers for this client)\t\t\t\t\t\t\n", r.Topic)
	}
	for _, q := range r.Queues {
		var bg groupOut
		for _, b := range r.BrokerGroups {
			if b.Name == q.BrokerName {
				bg = b
			}
		}
		if len(bg.Brokers) == 0 { // queues of a group with no broker listed
			tablef(tw, "%s\t%s\t%d\t%d\t%s\t-\t-\t%s\n", r.Topic, q.BrokerName, q.ReadQueues, q.WriteQueues, q.PermFlags, bg.Zone)
		}
		for i, m := range bg.Brokers {
			if i == 0 {
				tablef(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", r.Topic, q.BrokerName, q.ReadQueues, q.WriteQueues, q.PermFlags, m.BrokerID, m.Addr, bg.Zone)
				continue
			}
			tablef(tw, "\t\t\t\t\t%d\t%s\t\n", m.BrokerID, m.Addr)
		}
	}
}

func newClustersCmd(g *globals) *cobra.Command {
	var allNodes bool
	cmd := &cobra.Command{
		Use:   "clusters",
		Short: "List clusters, their broker groups and brokers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.readOneOrAll(cmd, allNodes, func(c *client.Conn, ctx contextT) (any, error) {
				ci, err := c.ClusterInfo(ctx)
				return newClustersOut(ci), err
			}, func(tw *tabwriter.Writer, v any) {
				fmt.Fprintln(tw, "CLUSTER\tBROKER\tBROKER ID\tADDRESS\tZONE")
				for _, cl := range v.([]clusterOut) {
					for _, bg := range cl.BrokerGroups {
						for _, m := range bg.Brokers {
							tablef(tw, "%s\t%s\t%d\t%s\t%s\n", cl.Name, bg.Name, m.BrokerID, m.Addr, bg.Zone)
						}
					}
				}
			}, clusterKeys)
		},
	}
	cmd.Flags().BoolVar(&allNodes, "all-nodes", false, "ask every node and show where they differ")
	return cmd
}

func newTopicsCmd(g *globals) *cobra.Command {
	var cluster, kind string
	var allNodes bool
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "List topics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := topicsQuery(cluster, kind)
			if err != nil {
				return err
			}
			return g.readOneOrAll(cmd, allNodes, func(c *client.Conn, ctx contextT) (any, error) { return c.Topics(ctx, q) },
				func(tw *tabwriter.Writer, v any) {
					for _, t := range v.([]string) {
						tableln(tw, t)
					}
				}, topicKeys(q))
		},
	}
	cmd.Flags().BoolVar(&allNodes, "all-nodes", false, "ask every node and show where they differ")
	cmd.Flags().StringVar(&cluster, "cluster", "", "only topics of this cluster")
	cmd.Flags().StringVar(&kind, "kind", "all", "which list: all, system, unit, unit-sub, unit-sub-only")
	cmd.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions(topicKinds, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// topicKinds are the values of topics --kind.
var topicKinds = []string{"all", "system", "unit", "unit-sub", "unit-sub-only"}

func topicsQuery(cluster, kind string) (wire.TopicsQuery, error) {
	kinds := map[string]wire.TopicsKind{
		"all": wire.TopicsAll, "system": wire.TopicsSystem, "unit": wire.TopicsUnit,
		"unit-sub": wire.TopicsUnitSub, "unit-sub-only": wire.TopicsUnitSubWithoutUnit,
	}
	k, ok := kinds[kind]
	if !ok {
		return wire.TopicsQuery{}, usageError{fmt.Errorf("--kind %q: use all, system, unit, unit-sub or unit-sub-only", kind)}
	}
	if cluster != "" {
		if k != wire.TopicsAll {
			return wire.TopicsQuery{}, usageError{errors.New("--cluster goes with --kind all only")}
		}
		k = wire.TopicsByCluster
	}
	return wire.TopicsQuery{Kind: k, Cluster: cluster}, nil
}

func newTopicCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "topic", Short: "Change a topic on every node"}
	var clusters []string
	del := &cobra.Command{
		Use:               "delete TOPIC",
		Short:             "Delete a topic's route everywhere, or only in some clusters, on every node",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeTopics(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.everyNode(cmd, func(c *client.Conn, ctx contextT) (any, error) {
				return nil, c.DeleteTopic(ctx, args[0], clusters...)
			})
		},
	}
	del.Flags().StringSliceVar(&clusters, "cluster", nil, "only from these clusters (repeatable)")
	cmd.AddCommand(del)
	return cmd
}

func newPermCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "perm", Short: "Wipe or restore a broker group's write permission on every node"}
	for _, action := range []string{"wipe", "add"} {
		cmd.AddCommand(&cobra.Command{
			Use:   action + " BROKER",
			Short: map[string]string{"wipe": "Take write permission away from every topic of a broker group", "add": "Restore read and write permission on every topic of a broker group"}[action],
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return g.everyNode(cmd, func(c *client.Conn, ctx contextT) (any, error) {
					var n int
					var err error
					if action == "wipe" {
						n, err = c.WipeWritePerm(ctx, args[0])
					} else {
						n, err = c.AddWritePerm(ctx, args[0])
					}
					return permChange{TopicsChanged: n}, err
				})
			},
		})
	}
	return cmd
}

// permChange is one node's answer to perm wipe or add.
type permChange struct {
	TopicsChanged int `json:"topics_changed"`
}

func (p permChange) String() string {
	if p.TopicsChanged == 1 {
		return "1 topic changed"
	}
	return fmt.Sprintf("%d topics changed", p.TopicsChanged)
}

func newLeasesCmd(g *globals) *cobra.Command {
	var allNodes bool
	cmd := &cobra.Command{
		Use:   "leases",
		Short: "List the live brokers of a node with their lease deadlines",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.readOneOrAll(cmd, allNodes, func(c *client.Conn, ctx contextT) (any, error) {
				ls, err := c.Leases(ctx)
				out := make([]leaseOut, 0, len(ls))
				for _, l := range ls {
					out = append(out, newLeaseOut(l))
				}
				return out, err
			}, func(tw *tabwriter.Writer, v any) {
				fmt.Fprintln(tw, "CLUSTER\tBROKER\tBROKER ID\tADDRESS\tEPOCH\tLAST HEARTBEAT\tDEADLINE")
				for _, l := range v.([]leaseOut) {
					tablef(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", l.Cluster, l.BrokerName, l.BrokerID, l.Addr, l.Epoch,
						l.LastHeartbeat.Format(time.RFC3339), l.Deadline.Format(time.RFC3339))
				}
			}, leaseKeys)
		},
	}
	cmd.Flags().BoolVar(&allNodes, "all-nodes", false, "ask every node and show where they differ")
	return cmd
}
