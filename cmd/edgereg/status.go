package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
)

// Nodes share nothing, so an operator needs to see them side by side:
// `edgereg status` asks every node for its facts and flags where they
// drift apart (policies, lease counts, brokers one node lacks); --all-nodes
// on leases, clusters and topics shows each node's answer.

// nodeStatus is one node's row of `edgereg status`. Its keys are those of
// the node's /status.json for the same facts (warming_up, lease_count,
// topic_count, policies as a list of hook and hash).
type nodeStatus struct {
	Node          string       `json:"node"`
	Error         string       `json:"error,omitempty"`
	NodeID        string       `json:"node_id,omitempty"`
	Version       string       `json:"version,omitempty"`
	Started       time.Time    `json:"started,omitzero"`
	UptimeSeconds int64        `json:"uptime_seconds,omitempty"`
	WarmingUp     bool         `json:"warming_up"`
	Leases        int          `json:"lease_count"`
	Topics        int          `json:"topic_count"`
	Connections   int          `json:"connections"`
	Policies      []policyHash `json:"policies"` // the hooks that run a module, by hook
	hashes        map[string]string
	brokers       []string
}

// MarshalJSON gives a node that did not answer its address and error
// only: zero counts and "warming_up": false would read as facts.
func (n nodeStatus) MarshalJSON() ([]byte, error) {
	if n.Error != "" {
		return json.Marshal(unanswered{n.Node, n.Error})
	}
	type plain nodeStatus
	return json.Marshal(plain(n))
}

// unanswered is how -o json shows a node that did not answer.
type unanswered struct {
	Node  string `json:"node"`
	Error string `json:"error"`
}

// policyHash is the module active on a hook: its SHA-256, hex.
type policyHash struct {
	Hook string `json:"hook"`
	Hash string `json:"hash"`
}

// drift is one way the nodes disagree.
type drift struct {
	Kind   string `json:"kind"` // policy, lease_count, broker
	Detail string `json:"detail"`
}

type statusOut struct {
	Nodes []nodeStatus `json:"nodes"`
	Drift []drift      `json:"drift"`
}

func newStatusCmd(g *globals) *cobra.Command {
	var src nodeSourceFlags
	var tolerance int
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every node side by side and flag where they drift apart",
		Long: `Ask every node (--nodes, or --nodes-dns/--nodes-srv/--nodes-url) for its identity,
version, uptime, readiness, lease, topic and connection counts and the policy module
active on each hook, and flag drift: different policies, lease counts that differ by
more than --lease-tolerance, and brokers one node holds a lease for and another does
not (that node is cut off from the broker, or the broker from it). Exits 1 when a
node did not answer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tolerance < 0 { // every pair of nodes would be drift, even equal ones
				return usageError{fmt.Errorf("--lease-tolerance %d: give zero or a positive count", tolerance)}
			}
			return runStatus(cmd, g, &src, tolerance)
		},
	}
	src.add(cmd)
	cmd.Flags().IntVar(&tolerance, "lease-tolerance", 0, "lease counts may differ by this much before it is drift")
	return cmd
}

// resolveNodes reads the node list once from the flags' source.
func (g *globals) resolveNodes(ctx context.Context, src *nodeSourceFlags) ([]string, error) {
	s, err := src.source(g)
	if err != nil {
		return nil, err
	}
	addrs, err := s.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("find nodes: %w", err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("find nodes: the source lists none")
	}
	return addrs, nil
}

// onEach runs fn against each node at once, with a connection of its own.
func (g *globals) onEach(ctx context.Context, addrs []string, fn func(i int, c *client.Conn) error) []error {
	conf, err := g.clientTLS()
	if err != nil {
		return []error{err}
	}
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			c, err := client.Dial(ctx, addr, client.Config{TLS: conf})
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close()
			errs[i] = fn(i, c)
		})
	}
	wg.Wait()
	return errs
}

func runStatus(cmd *cobra.Command, g *globals, src *nodeSourceFlags, tolerance int) error {
	ctx, cancel, err := g.context(cmd.Context())
	if err != nil {
		return err
	}
	defer cancel()
	addrs, err := g.resolveNodes(ctx, src)
	if err != nil {
		return err
	}
	out := statusOut{Nodes: make([]nodeStatus, len(addrs)), Drift: []drift{}}
	errs := g.onEach(ctx, addrs, func(i int, c *client.Conn) error {
		var info wire.NodeInfo
		if err := c.Call(ctx, wire.TypeNodeInfo, nil, &info); err != nil {
			return fmt.Errorf("node-info: %w", err)
		}
		leases, err := c.Leases(ctx)
		if err != nil {
			return fmt.Errorf("leases: %w", err)
		}
		ns := &out.Nodes[i]
		ns.NodeID, ns.Version, ns.WarmingUp = info.NodeID, info.Version, info.WarmingUp
		ns.Started = time.UnixMilli(info.StartedMs).UTC()
		ns.UptimeSeconds = (info.NowMs - info.StartedMs) / 1000
		ns.Leases, ns.Topics, ns.Connections, ns.hashes = info.Leases, info.Topics, info.Connections, info.Policies
		for _, hook := range slices.Sorted(maps.Keys(info.Policies)) {
			ns.Policies = append(ns.Policies, policyHash{Hook: hook, Hash: info.Policies[hook]})
		}
		for _, l := range leases {
			ns.brokers = append(ns.brokers, fmt.Sprintf("%s/%s/%d %s", l.Cluster, l.BrokerName, l.BrokerID, l.Addr))
		}
		return nil
	})
	failed := 0
	for i, addr := range addrs {
		out.Nodes[i].Node = addr
		if out.Nodes[i].Policies == nil {
			out.Nodes[i].Policies = []policyHash{}
		}
		if errs[i] != nil {
			out.Nodes[i].Error = errs[i].Error()
			failed++
		}
	}
	out.Drift = findDrift(out.Nodes, tolerance)
	if err := g.emit(cmd.OutOrStdout(), out, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "NODE\tID\tVERSION\tUPTIME\tSTATE\tLEASES\tTOPICS\tCONNS\tPOLICIES")
		for _, n := range out.Nodes {
			if n.Error != "" {
				tablef(tw, "%s\terror: %s\n", n.Node, n.Error)
				continue
			}
			state := "ready"
			if n.WarmingUp {
				state = "warming"
			}
			tablef(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", n.Node, n.NodeID, n.Version,
				(time.Duration(n.UptimeSeconds) * time.Second).String(), state, n.Leases, n.Topics, n.Connections, hookHashes(n.hashes))
		}
		if failed == len(out.Nodes) {
			return // no node answered: nothing to compare
		}
		if len(out.Drift) == 0 {
			fmt.Fprintln(tw, "\nno drift between the nodes that answered")
			return
		}
		fmt.Fprintln(tw, "\nDRIFT\tDETAIL")
		for _, d := range out.Drift {
			tablef(tw, "%s\t%s\n", d.Kind, d.Detail)
		}
	}); err != nil {
		return err
	}
	return nodesFailed("did not answer", failed, errs)
}

func hookHashes(p map[string]string) string {
	if len(p) == 0 {
		return "-"
	}
	var parts []string
	for _, hook := range slices.Sorted(maps.Keys(p)) {
		parts = append(parts, hook+"="+short(p[hook]))
	}
	return strings.Join(parts, ",")
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// findDrift compares the nodes that answered.
func findDrift(ns []nodeStatus, tolerance int) []drift {
	var ok []nodeStatus
	for _, n := range ns {
		if n.Error == "" {
			ok = append(ok, n)
		}
	}
	out := []drift{}
	if len(ok) < 2 {
		return out
	}
	for _, hook := range wire.PolicyHooks {
		byHash := make(map[string][]string)
		for _, n := range ok {
			h := n.hashes[hook]
			if h == "" {
				h = "built-in"
			}
			byHash[h] = append(byHash[h], n.Node)
		}
		if len(byHash) > 1 {
			var parts []string
			for _, h := range slices.Sorted(maps.Keys(byHash)) {
				parts = append(parts, fmt.Sprintf("%s on %s", short(h), strings.Join(byHash[h], ",")))
			}
			out = append(out, drift{Kind: "policy", Detail: fmt.Sprintf("hook %s: %s", hook, strings.Join(parts, "; "))})
		}
	}
	lo, hi := ok[0], ok[0]
	for _, n := range ok {
		if n.Leases < lo.Leases {
			lo = n
		}
		if n.Leases > hi.Leases {
			hi = n
		}
	}
	if hi.Leases-lo.Leases > tolerance {
		out = append(out, drift{Kind: "lease_count", Detail: fmt.Sprintf("%s holds %d leases, %s holds %d (tolerance %d)", hi.Node, hi.Leases, lo.Node, lo.Leases, tolerance)})
	}
	holders := make(map[string][]string)
	for _, n := range ok {
		for _, b := range n.brokers {
			holders[b] = append(holders[b], n.Node)
		}
	}
	keys := slices.Collect(maps.Keys(holders))
	sort.Strings(keys)
	for _, b := range keys {
		if len(holders[b]) == len(ok) {
			continue
		}
		var lacking []string
		for _, n := range ok {
			if !slices.Contains(holders[b], n.Node) {
				lacking = append(lacking, n.Node)
			}
		}
		out = append(out, drift{Kind: "broker", Detail: fmt.Sprintf("%s: lease on %s, none on %s", b, strings.Join(holders[b], ","), strings.Join(lacking, ","))})
	}
	return out
}

// readOneOrAll runs a read on the first node that answers and says on
// stderr which node that was; with all, it runs it on every node, prints
// each node's answer and the rows some nodes have and others lack. keys
// reads a node's rows itself (one more request per node), so it does not
// depend on the shape fn gives the output.
func (g *globals) readOneOrAll(cmd *cobra.Command, all bool, fn func(*client.Conn, contextT) (any, error),
	table func(*tabwriter.Writer, any), keys func(*client.Conn, contextT) ([]string, error)) error {
	if !all {
		return g.readOne(cmd, func(c *client.Conn, ctx contextT) (any, error) {
			v, err := fn(c, ctx)
			if err == nil && (g.output == "table" || g.output == "") {
				fmt.Fprintf(cmd.ErrOrStderr(), "answered by %s\n", c.Addr())
			}
			return v, err
		}, table)
	}
	ctx, cancel, err := g.context(cmd.Context())
	if err != nil {
		return err
	}
	defer cancel()
	addrs, err := g.nodeList()
	if err != nil {
		return err
	}
	type perNode struct {
		Node  string `json:"node"`
		Error string `json:"error,omitempty"`
		Value any    `json:"value,omitempty"`
	}
	type allOut struct {
		Nodes []perNode `json:"nodes"`
		// Differences lists rows some nodes have and others lack.
		Differences []string `json:"differences"`
	}
	out := allOut{Nodes: make([]perNode, len(addrs)), Differences: []string{}}
	rows := make([][]string, len(addrs))
	errs := g.onEach(ctx, addrs, func(i int, c *client.Conn) error {
		v, err := fn(c, ctx)
		out.Nodes[i].Value = v
		if err != nil {
			return err
		}
		rows[i], err = keys(c, ctx)
		return err
	})
	failed := 0
	holders := make(map[string][]string)
	var answered []string
	for i, addr := range addrs {
		out.Nodes[i].Node = addr
		if errs[i] != nil {
			out.Nodes[i].Error = errs[i].Error()
			failed++
			continue
		}
		answered = append(answered, addr)
		for _, k := range rows[i] {
			holders[k] = append(holders[k], addr)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(holders)) {
		if len(holders[k]) < len(answered) {
			out.Differences = append(out.Differences, fmt.Sprintf("%s: only on %s", k, strings.Join(holders[k], ",")))
		}
	}
	if err := g.emit(cmd.OutOrStdout(), out, func(tw *tabwriter.Writer) {
		for _, n := range out.Nodes {
			tablef(tw, "== node %s\n", n.Node)
			if n.Error != "" {
				tablef(tw, "error: %s\n", n.Error)
				continue
			}
			table(tw, n.Value)
		}
		if len(answered) == 0 {
			return // no node answered: nothing to compare
		}
		if len(out.Differences) == 0 {
			fmt.Fprintln(tw, "== every node that answered agrees")
			return
		}
		fmt.Fprintln(tw, "== differences")
		for _, d := range out.Differences {
			tableln(tw, d)
		}
	}); err != nil {
		return err
	}
	return nodesFailed("failed", failed, errs)
}

// Rows compared by --all-nodes.
func leaseKeys(c *client.Conn, ctx contextT) ([]string, error) {
	ls, err := c.Leases(ctx)
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("broker %s/%s/%d %s", l.Cluster, l.BrokerName, l.BrokerID, l.Addr))
	}
	return out, err
}

func clusterKeys(c *client.Conn, ctx contextT) ([]string, error) {
	ci, err := c.ClusterInfo(ctx)
	var out []string
	for cl, groups := range ci.Clusters {
		for _, g := range groups {
			for id, addr := range ci.Groups[g].Addrs {
				out = append(out, fmt.Sprintf("broker %s/%s/%d %s", cl, g, id, addr))
			}
		}
	}
	return out, err
}

func topicKeys(q wire.TopicsQuery) func(*client.Conn, contextT) ([]string, error) {
	return func(c *client.Conn, ctx contextT) ([]string, error) {
		ts, err := c.Topics(ctx, q)
		var out []string
		for _, t := range ts {
			out = append(out, "topic "+t)
		}
		return out, err
	}
}
