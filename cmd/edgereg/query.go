package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/nodes"
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
	return usageError{fmt.Errorf("-o %q: use table or json", g.output)}
}

func newRouteCmd(g *globals) *cobra.Command {
	var zone string
	var labels []string
	var watch bool
	var wait time.Duration
	var src nodeSourceFlags
	cmd := &cobra.Command{
		Use:   "route TOPIC... [--watch]",
		Short: "Show where topics live",
		Long: `Show the route of each topic: its queues on every broker group that holds it,
and the addresses of those groups' brokers. --zone and --label are sent to the
node as the client's attributes, so a route policy filters as it would for a
client in that zone. A topic not found, or a node still warming up, is asked
again for --wait, so a read right after a broker starts sees its registration.
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
			if watch {
				return runWatch(cmd, g, s, topics, attrs)
			}
			if wait < 0 {
				return usageError{fmt.Errorf("--wait %s: give zero or a positive duration", wait)}
			}
			return runRoute(cmd, g, s, topics, attrs, wait)
		},
	}
	cmd.Flags().StringVar(&zone, "zone", "", "the client's zone, for route policies")
	cmd.Flags().StringSliceVar(&labels, "label", nil, "client label key=value, for route policies (repeatable)")
	cmd.Flags().BoolVar(&watch, "watch", false, "keep running and print each change as it arrives")
	cmd.Flags().DurationVar(&wait, "wait", 3*time.Second, "keep asking this long while a topic is not found or the nodes warm up (0: answer at once)")
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

func runRoute(cmd *cobra.Command, g *globals, src nodes.Source, topics []string, attrs wire.ClientAttrs, wait time.Duration) error {
	ctx, cancel, err := g.context(cmd.Context())
	if err != nil {
		return err
	}
	defer cancel()
	list, err := src.Nodes(ctx)
	if err != nil {
		return fmt.Errorf("find nodes (%s): %w", src, err)
	}
	q := &wire.GetRoutes{Client: attrs}
	for _, t := range topics {
		q.Topics = append(q.Topics, wire.TopicVersion{Topic: t})
	}
	giveUp := time.Now().Add(wait)
	var out []routeOut
	var missing []string
	for attempt := 0; ; attempt++ {
		out, missing, err = readRoutes(ctx, g, list, q)
		again := (err == nil && len(missing) > 0) || errors.Is(err, wire.ErrWarmingUp)
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
	if err != nil {
		return err
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
		return wire.Errorf(wire.CodeNotFound, "topic %s not found", strings.Join(missing, ", "))
	}
	return nil
}

// readRoutes asks the first node of list that answers for q's routes and
// returns those found and the topics not found. A node still warming up is
// passed over for the next.
func readRoutes(ctx context.Context, g *globals, list []string, q *wire.GetRoutes) (out []routeOut, missing []string, err error) {
	err = g.withNodes(ctx, list, func(c *client.Conn) error {
		rs, err := c.GetRoutes(ctx, q)
		if err != nil {
			return err
		}
		out, missing = []routeOut{}, nil
		for i := range rs.Results {
			r := &rs.Results[i]
			if r.Status == wire.StatusNotFound {
				missing = append(missing, r.Topic)
				continue
			}
			route, version, err := client.DecodeResult(r)
			if err != nil {
				return err
			}
			out = append(out, newRouteOut(r.Topic, version, c.Addr(), route))
		}
		return nil
	})
	return out, missing, err
}

func printRoute(tw io.Writer, r routeOut) {
	for _, q := range r.Queues {
		var bg groupOut
		for _, b := range r.BrokerGroups {
			if b.Name == q.BrokerName {
				bg = b
			}
		}
		for i, m := range bg.Brokers {
			if i == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", r.Topic, q.BrokerName, q.ReadQueues, q.WriteQueues, q.PermFlags, m.BrokerID, m.Addr, bg.Zone)
				continue
			}
			fmt.Fprintf(tw, "\t\t\t\t\t%d\t%s\t\n", m.BrokerID, m.Addr)
		}
	}
}

func newClustersCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "clusters",
		Short: "List clusters, their broker groups and brokers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.readOne(cmd, func(c *client.Conn, ctx contextT) (any, error) {
				ci, err := c.ClusterInfo(ctx)
				return newClustersOut(ci), err
			}, func(tw *tabwriter.Writer, v any) {
				fmt.Fprintln(tw, "CLUSTER\tBROKER\tBROKER ID\tADDRESS\tZONE")
				for _, cl := range v.([]clusterOut) {
					for _, bg := range cl.BrokerGroups {
						for _, m := range bg.Brokers {
							fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", cl.Name, bg.Name, m.BrokerID, m.Addr, bg.Zone)
						}
					}
				}
			})
		},
	}
}

func newTopicsCmd(g *globals) *cobra.Command {
	var cluster, kind string
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "List topics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := topicsQuery(cluster, kind)
			if err != nil {
				return err
			}
			return g.readOne(cmd, func(c *client.Conn, ctx contextT) (any, error) { return c.Topics(ctx, q) },
				func(tw *tabwriter.Writer, v any) {
					for _, t := range v.([]string) {
						fmt.Fprintln(tw, t)
					}
				})
		},
	}
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
					return map[string]int{"topics_changed": n}, err
				})
			},
		})
	}
	return cmd
}

func newLeasesCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "leases",
		Short: "List the live brokers of a node with their lease deadlines",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.readOne(cmd, func(c *client.Conn, ctx contextT) (any, error) {
				ls, err := c.Leases(ctx)
				out := make([]leaseOut, 0, len(ls))
				for _, l := range ls {
					out = append(out, newLeaseOut(l))
				}
				return out, err
			}, func(tw *tabwriter.Writer, v any) {
				fmt.Fprintln(tw, "CLUSTER\tBROKER\tBROKER ID\tADDRESS\tEPOCH\tLAST HEARTBEAT\tDEADLINE")
				for _, l := range v.([]leaseOut) {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", l.Cluster, l.BrokerName, l.BrokerID, l.Addr, l.Epoch,
						l.LastHeartbeat.Format(time.RFC3339), l.Deadline.Format(time.RFC3339))
				}
			})
		},
	}
}
