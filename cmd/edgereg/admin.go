package main

import (
	"context"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
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
				tablef(tw, "%s\terror: %s\n", r.Node, r.Error)
			case r.Value != nil:
				tablef(tw, "%s\tok %v\n", r.Node, r.Value)
			default:
				tablef(tw, "%s\tok\n", r.Node)
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
				}, func(tw *tabwriter.Writer, v any) { tableln(tw, v.(map[string]string)["value"]) })
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
							tablef(tw, "%s\t%s\n", k, m[k])
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
	cmd := &cobra.Command{Use: "cert", Short: "Create a CA and issue credentials from it (the local CA in --data)"}
	cmd.AddCommand(newCertInitCmd(g), newCertIssueCmd(g), newCertCopyCmd(g))
	return cmd
}

// certOut is what the cert commands print with -o json.
type certOut struct {
	Action string   `json:"action"`
	Role   string   `json:"role,omitempty"`
	Name   string   `json:"name,omitempty"`
	Files  []string `json:"files"`
}

func (g *globals) emitCert(cmd *cobra.Command, out certOut) error {
	return g.emit(cmd.OutOrStdout(), out, func(tw *tabwriter.Writer) {
		what := slices.DeleteFunc([]string{out.Action, out.Role, out.Name}, func(s string) bool { return s == "" })
		tablef(tw, "%s: %s\n", strings.Join(what, " "), strings.Join(out.Files, ", "))
	})
}

func newCertInitCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "init",
		Short: "Create a new CA in --data (refused if one is there)",
		Long: `Create a new local CA, and the operator credential the CLI uses, in --data/tls.
A CA that exists is never replaced: every credential it signed would stop working.
'edgereg node' creates the same CA on its first start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := pki.InitCA(g.data)
			if err != nil {
				return err
			}
			var files []string
			for _, f := range []string{"ca.crt", "ca.key", "operator.crt", "operator.key"} {
				files = append(files, filepath.Join(l.Dir, f))
			}
			return g.emitCert(cmd, certOut{Action: "created CA and operator credential", Files: files})
		},
	}
}

func newCertIssueCmd(g *globals) *cobra.Command {
	var r pki.Request
	var role, out string
	var dns []string
	var ips []net.IP
	var force bool
	issue := &cobra.Command{
		Use:   "issue --role ROLE --name NAME --out DIR",
		Short: "Issue a certificate for a broker, client, operator or node",
		Long: `Issue a certificate and key signed by the CA in --data (made by 'edgereg cert init'
or by the first 'edgereg node' there; a directory without one is refused, never
given a new CA) and write NAME.crt, NAME.key and ca.crt into --out. Existing files
are not replaced without --force. A broker credential may be limited to broker
groups with --group; a node certificate carries NAME, the loopback names and any
--dns and --ip given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if r.Role, err = pki.ParseRole(role); err != nil {
				return usageError{err}
			}
			if (len(dns) > 0 || len(ips) > 0) && r.Role != pki.RoleNode {
				return usageError{fmt.Errorf("--dns and --ip are for --role node only, not %s", r.Role)}
			}
			r.Hosts = slices.Clone(dns)
			for _, ip := range ips {
				r.Hosts = append(r.Hosts, ip.String())
			}
			local, err := pki.OpenLocal(g.data)
			if err != nil {
				return err
			}
			if err := local.WriteCredential(r, out, force); err != nil {
				return err
			}
			return g.emitCert(cmd, certOut{Action: "issued", Role: string(r.Role), Name: r.Name, Files: []string{
				filepath.Join(out, r.Name+".crt"), filepath.Join(out, r.Name+".key"), filepath.Join(out, "ca.crt")}})
		},
	}
	f := issue.Flags()
	f.StringVar(&role, "role", "", "broker, client, operator or node")
	f.StringVar(&r.Name, "name", "", "the credential's name (certificate common name and file name)")
	f.StringVar(&out, "out", ".", "directory to write the files to")
	f.StringSliceVar(&r.Groups, "group", nil, "broker groups a broker credential may register (repeatable; none means any)")
	f.StringSliceVar(&dns, "dns", nil, "extra DNS name for a node certificate (repeatable)")
	f.IPSliceVar(&ips, "ip", nil, "extra IP address for a node certificate (repeatable)")
	f.DurationVar(&r.Validity, "validity", 365*24*time.Hour, "how long the credential is valid")
	f.BoolVar(&force, "force", false, "replace existing files in --out")
	issue.MarkFlagRequired("role")
	issue.MarkFlagRequired("name")
	issue.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"broker", "client", "operator", "node"}, cobra.ShellCompDirectiveNoFileComp))
	return issue
}

func newCertCopyCmd(g *globals) *cobra.Command {
	var name, from, out string
	cp := &cobra.Command{
		Use:   "copy --name NAME --from DIR --out DIR",
		Short: "Copy one credential (NAME.crt, NAME.key, ca.crt) after checking it",
		Long: `Copy NAME.crt, NAME.key and ca.crt from --from to --out, after checking that the
key matches the certificate and the certificate is signed by ca.crt. The shipped
Kubernetes StatefulSet runs it in an init container, so each node's container
mounts only its own key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := pki.CopyCredential(name, from, out); err != nil {
				return err
			}
			return g.emitCert(cmd, certOut{Action: "copied", Name: name, Files: []string{
				filepath.Join(out, name+".crt"), filepath.Join(out, name+".key"), filepath.Join(out, "ca.crt")}})
		},
	}
	cp.Flags().StringVar(&name, "name", "", "the credential's name")
	cp.Flags().StringVar(&from, "from", "", "directory holding NAME.crt, NAME.key and ca.crt")
	cp.Flags().StringVar(&out, "out", "", "directory to copy them to")
	for _, f := range []string{"name", "from", "out"} {
		cp.MarkFlagRequired(f)
	}
	return cp
}
