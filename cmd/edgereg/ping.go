package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
)

// pingOut is one node's line of `edgereg ping`.
type pingOut struct {
	Node      string `json:"node"`
	Error     string `json:"error,omitempty"`
	NodeID    string `json:"node_id,omitempty"`
	WarmingUp bool   `json:"warming_up"`
	// Round trips of the pings on one connection, in microseconds; the
	// dial (QUIC and TLS handshakes) is measured apart.
	DialUs int64 `json:"dial_us"`
	MinUs  int64 `json:"min_us"`
	AvgUs  int64 `json:"avg_us"`
	MaxUs  int64 `json:"max_us"`
	Pings  int   `json:"pings"`
}

// MarshalJSON gives a node whose pings failed its address and error only,
// as status does: zero round trips would read as measurements.
func (p pingOut) MarshalJSON() ([]byte, error) {
	if p.Error != "" {
		return json.Marshal(unanswered{p.Node, p.Error})
	}
	type plain pingOut
	return json.Marshal(plain(p))
}

func newPingCmd(g *globals) *cobra.Command {
	var src nodeSourceFlags
	var count int
	cmd := &cobra.Command{
		Use:   "ping",
		Short: "Measure each node's round trip",
		Long: `Dial every node (--nodes, or --nodes-dns/--nodes-srv/--nodes-url) at once and send
--count pings on one connection each: prints the dial time and the minimum, average
and maximum round trip per node. Exits 1 when a node did not answer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if count < 1 {
				return usageError{fmt.Errorf("--count %d: give at least 1", count)}
			}
			ctx, cancel, err := g.context(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			addrs, err := g.resolveNodes(ctx, &src)
			if err != nil {
				return err
			}
			conf, err := g.clientTLS()
			if err != nil {
				return err
			}
			out := make([]pingOut, len(addrs))
			errs := make([]error, len(addrs))
			done := make(chan struct{}, len(addrs))
			for i, addr := range addrs {
				go func() {
					defer func() { done <- struct{}{} }()
					out[i].Node = addr
					start := time.Now()
					c, err := client.Dial(ctx, addr, client.Config{TLS: conf})
					if err != nil {
						errs[i] = err
						return
					}
					defer c.Close()
					out[i].DialUs = time.Since(start).Microseconds()
					var total time.Duration
					for k := range count {
						t0 := time.Now()
						var pong wire.Pong
						if err := c.Call(ctx, wire.TypePing, nil, &pong); err != nil {
							errs[i] = err
							return
						}
						rtt := time.Since(t0)
						out[i].NodeID, out[i].WarmingUp = pong.NodeID, pong.WarmingUp
						if k == 0 || rtt.Microseconds() < out[i].MinUs {
							out[i].MinUs = rtt.Microseconds()
						}
						out[i].MaxUs = max(out[i].MaxUs, rtt.Microseconds())
						total += rtt
						out[i].Pings++
					}
					out[i].AvgUs = (total / time.Duration(count)).Microseconds()
				}()
			}
			failed := 0
			for range addrs {
				<-done
			}
			for i := range out {
				if errs[i] != nil {
					out[i].Error = errs[i].Error()
					failed++
				}
			}
			if err := g.emit(cmd.OutOrStdout(), out, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "NODE\tID\tDIAL\tMIN\tAVG\tMAX\tSTATE")
				for _, p := range out {
					if p.Error != "" {
						tablef(tw, "%s\terror: %s\n", p.Node, p.Error)
						continue
					}
					state := "ready"
					if p.WarmingUp {
						state = "warming"
					}
					us := func(v int64) string { return (time.Duration(v) * time.Microsecond).String() }
					tablef(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Node, p.NodeID, us(p.DialUs), us(p.MinUs), us(p.AvgUs), us(p.MaxUs), state)
				}
			}); err != nil {
				return err
			}
			return nodesFailed("did not answer", failed, errs)
		},
	}
	src.add(cmd)
	cmd.Flags().IntVar(&count, "count", 3, "pings per node")
	return cmd
}
