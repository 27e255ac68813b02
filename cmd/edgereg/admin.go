package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

type contextT = context.Context

// everyNode runs a change on every node in --nodes and prints each node's
// result; it fails if any node failed.
func (g *globals) everyNode(cmd *cobra.Command, fn func(*client.Conn, contextT) (any, error)) error {
	ctx, cancel, err := g.context(cmd.Context())
	if err != nil {
		return err
	}
	defer cancel()
	results, runErr := g.withEveryNode(ctx, func(c *client.Conn) (any, error) { return fn(c, ctx) })
	if results == nil {
		return runErr
	}
	if err := g.emit(cmd.OutOrStdout(), results, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "NODE\tRESULT")
		for _, r := range results {
			switch {
			case r.Error != "":
				fmt.Fprintf(tw, "%s\terror: %s\n", r.Node, r.Error)
			case r.Value != nil:
				fmt.Fprintf(tw, "%s\tok %v\n", r.Node, r.Value)
			default:
				fmt.Fprintf(tw, "%s\tok\n", r.Node)
			}
		}
	}); err != nil {
		return err
	}
	return runErr
}

func newKVCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "kv", Short: "Read and change the KV config (writes go to every node)"}
	cmd.AddCommand(
		&cobra.Command{
			Use: "put NAMESPACE KEY VALUE", Short: "Set a value on every node", Args: cobra.ExactArgs(3),
			RunE: func(cmd *cobra.Command, a []string) error {
				return g.everyNode(cmd, func(c *client.Conn, ctx contextT) (any, error) { return nil, c.KVPut(ctx, a[0], a[1], a[2]) })
			},
		},
		&cobra.Command{
			Use: "del NAMESPACE KEY", Aliases: []string{"delete"}, Short: "Delete a value on every node", Args: cobra.ExactArgs(2),
			RunE: func(cmd *cobra.Command, a []string) error {
				return g.everyNode(cmd, func(c *client.Conn, ctx contextT) (any, error) { return nil, c.KVDelete(ctx, a[0], a[1]) })
			},
		},
		&cobra.Command{
			Use: "get NAMESPACE KEY", Short: "Read a value", Args: cobra.ExactArgs(2),
			RunE: func(cmd *cobra.Command, a []string) error {
				return g.readOne(cmd, func(c *client.Conn, ctx contextT) (any, error) {
					v, err := c.KVGet(ctx, a[0], a[1])
					return map[string]string{"namespace": a[0], "key": a[1], "value": v}, err
				}, func(tw *tabwriter.Writer, v any) { fmt.Fprintln(tw, v.(map[string]string)["value"]) })
			},
		},
		&cobra.Command{
			Use: "list NAMESPACE", Short: "List a namespace", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, a []string) error {
				return g.readOne(cmd, func(c *client.Conn, ctx contextT) (any, error) { return c.KVList(ctx, a[0]) },
					func(tw *tabwriter.Writer, v any) {
						m := v.(map[string]string)
						fmt.Fprintln(tw, "KEY\tVALUE")
						for _, k := range slices.Sorted(maps.Keys(m)) {
							fmt.Fprintf(tw, "%s\t%s\n", k, m[k])
						}
					})
			},
		},
	)
	return cmd
}

// readOne runs a read against the first node that answers and prints it.
func (g *globals) readOne(cmd *cobra.Command, fn func(*client.Conn, contextT) (any, error), table func(*tabwriter.Writer, any)) error {
	ctx, cancel, err := g.context(cmd.Context())
	if err != nil {
		return err
	}
	defer cancel()
	var v any
	if err := g.withAnyNode(ctx, func(c *client.Conn) (err error) {
		v, err = fn(c, ctx)
		return err
	}); err != nil {
		return err
	}
	return g.emit(cmd.OutOrStdout(), v, func(tw *tabwriter.Writer) { table(tw, v) })
}

func newCertCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "cert", Short: "Issue credentials from the local CA in --data"}
	var role, name, out string
	var groups []string
	var validity time.Duration
	issue := &cobra.Command{
		Use:   "issue --role ROLE --name NAME --out DIR",
		Short: "Issue a certificate for a broker, client, operator or node",
		Long: `Issue a certificate and key signed by the local CA in --data (created by the first
'edgereg node' there) and write NAME.crt, NAME.key and ca.crt into --out. A broker
credential may be limited to broker groups with --group.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := pki.ParseRole(role)
			if err != nil {
				return usageError{err}
			}
			local, err := pki.EnsureLocal(g.data, nil)
			if err != nil {
				return err
			}
			if err := local.IssueFiles(r, name, groups, validity, out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "issued %s credential %q: %s/%s.crt, %s/%s.key, %s/ca.crt\n", r, name, out, name, out, name, out)
			return nil
		},
	}
	f := issue.Flags()
	f.StringVar(&role, "role", "", "broker, client, operator or node")
	f.StringVar(&name, "name", "", "the credential's name (certificate common name and file name)")
	f.StringVar(&out, "out", ".", "directory to write the files to")
	f.StringSliceVar(&groups, "group", nil, "broker groups a broker credential may register (repeatable; none means any)")
	f.DurationVar(&validity, "validity", 365*24*time.Hour, "how long the credential is valid")
	issue.MarkFlagRequired("role")
	issue.MarkFlagRequired("name")
	cmd.AddCommand(issue)
	return cmd
}
