package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
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

// routeOut is one topic's route as the CLI prints it.
type routeOut struct {
	Topic   string     `json:"topic"`
	Version string     `json:"version"`
	Node    string     `json:"node"`
	Route   wire.Route `json:"route"`
}

func newRouteCmd(g *globals) *cobra.Command {
	var zone string
	var labels []string
	var watch bool
	var src nodeSourceFlags
	cmd := &cobra.Command{
		Use:   "route TOPIC... [--watch]",
		Short: "Show where topics live",
		Long: `Show the route of each topic: its queues on every broker group that holds it,
and the addresses of those groups' brokers. --zone and --label are sent to the
node as the client's attributes, so a route policy filters as it would for a
client in that zone. With --watch it keeps running and prints each change as
the node pushes it, failing over between nodes, until interrupted.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, topics []string) error {
			attrs, err := clientAttrs(zone, labels)
			if err != nil {
				return err
			}
			if watch {
				s, err := src.source(g)
				if err != nil {
					return err
				}
				return runWatch(cmd, g, s, topics, attrs)
			}
			return runRoute(cmd, g, topics, attrs)
		},
	}
	cmd.Flags().StringVar(&zone, "zone", "", "the client's zone, for route policies")
	cmd.Flags().StringSliceVar(&labels, "label", nil, "client label key=value, for route policies (repeatable)")
	cmd.Flags().BoolVar(&watch, "watch", false, "keep running and print each change as it arrives")
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

func runRoute(cmd *cobra.Command, g *globals, topics []string, attrs wire.ClientAttrs) error {
	ctx, cancel, err := g.context(cmd.Context())
	if err != nil {
		return err
	}
	defer cancel()
	q := &wire.GetRoutes{Client: attrs}
	for _, t := range topics {
		q.Topics = append(q.Topics, wire.TopicVersion{Topic: t})
	}
	var out []routeOut
	err = g.withAnyNode(ctx, func(c *client.Conn) error {
		rs, err := c.GetRoutes(ctx, q)
		if err != nil {
			return err
		}
		out = out[:0]
		for i := range rs.Results {
			route, version, err := client.DecodeResult(&rs.Results[i])
			if err != nil {
				return err
			}
			out = append(out, routeOut{Topic: rs.Results[i].Topic, Version: fmt.Sprintf("%016x", version), Node: c.Addr(), Route: route})
		}
		return nil
	})
	if err != nil {
		return err
	}
	return g.emit(cmd.OutOrStdout(), out, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "TOPIC\tBROKER\tREAD\tWRITE\tPERM\tBROKER ID\tADDRESS\tZONE")
		for _, r := range out {
			printRoute(tw, r)
		}
	})
}

func printRoute(tw io.Writer, r routeOut) {
	for _, q := range r.Route.Queues {
		var bd wire.BrokerData
		for _, b := range r.Route.Brokers {
			if b.Name == q.BrokerName {
				bd = b
			}
		}
		ids := make([]int64, 0, len(bd.Addrs))
		for id := range bd.Addrs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for i, id := range ids {
			if i == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", r.Topic, q.BrokerName, q.ReadQueues, q.WriteQueues, wire.PermString(q.Perm), id, bd.Addrs[id], bd.Zone)
				continue
			}
			fmt.Fprintf(tw, "\t\t\t\t\t%d\t%s\t\n", id, bd.Addrs[id])
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
			return g.readOneOrAll(cmd, allNodes, func(c *client.Conn, ctx contextT) (any, error) { return c.ClusterInfo(ctx) },
				func(tw *tabwriter.Writer, v any) {
					ci := v.(wire.ClusterInfo)
					fmt.Fprintln(tw, "CLUSTER\tBROKER\tBROKER ID\tADDRESS\tZONE")
					for _, cl := range slices.Sorted(maps.Keys(ci.Clusters)) {
						for _, group := range ci.Clusters[cl] {
							printGroup(tw, cl, ci.Groups[group])
						}
					}
				}, clusterKeys)
		},
	}
	cmd.Flags().BoolVar(&allNodes, "all-nodes", false, "ask every node and show where they differ")
	return cmd
}

func printGroup(tw io.Writer, cluster string, bd wire.BrokerData) {
	ids := make([]int64, 0, len(bd.Addrs))
	for id := range bd.Addrs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", cluster, bd.Name, id, bd.Addrs[id], bd.Zone)
	}
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
						fmt.Fprintln(tw, t)
					}
				}, topicKeys(q))
		},
	}
	cmd.Flags().BoolVar(&allNodes, "all-nodes", false, "ask every node and show where they differ")
	cmd.Flags().StringVar(&cluster, "cluster", "", "only topics of this cluster")
	cmd.Flags().StringVar(&kind, "kind", "all", "which list: all, system, unit, unit-sub, unit-sub-only")
	return cmd
}

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
		Use:   "delete TOPIC",
		Short: "Delete a topic's route everywhere, or only in some clusters, on every node",
		Args:  cobra.ExactArgs(1),
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
	var allNodes bool
	cmd := &cobra.Command{
		Use:   "leases",
		Short: "List the live brokers of a node with their lease deadlines",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.readOneOrAll(cmd, allNodes, func(c *client.Conn, ctx contextT) (any, error) { return c.Leases(ctx) }, func(tw *tabwriter.Writer, v any) {
				fmt.Fprintln(tw, "CLUSTER\tBROKER\tBROKER ID\tADDRESS\tEPOCH\tLAST HEARTBEAT\tDEADLINE")
				for _, l := range v.([]wire.LeaseInfo) {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\n", l.Cluster, l.BrokerName, l.BrokerID, l.Addr, l.Epoch,
						time.UnixMilli(l.LastHeartbeatMs).Format(time.RFC3339), time.UnixMilli(l.DeadlineMs).Format(time.RFC3339))
				}
			}, leaseKeys)
		},
	}
	cmd.Flags().BoolVar(&allNodes, "all-nodes", false, "ask every node and show where they differ")
	return cmd
}
