// Command edgereg is the edgereg route registry: one binary for the node,
// brokers, clients and operators. Run `edgereg help` for the commands.
//
// Every flag can also be set by an environment variable: EDGEREG_ followed
// by the flag's name in upper case with dashes as underscores (--nodes is
// EDGEREG_NODES). A flag given on the command line wins.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/quic-go/quic-go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/routeclient"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "edgereg:", err)
		os.Exit(exitCode(err))
	}
}

// Exit codes, for scripts (README.md, "Exit codes").
const (
	exitFailure     = 1 // anything else
	exitUsage       = 2 // a flag, argument or setting is wrong
	exitNotFound    = 3 // the topic, key or lease asked for does not exist
	exitUnreachable = 4 // no node could be reached in time
	exitRefused     = 5 // TLS or authorization refused the credential
	exitPartial     = 6 // a change reached some nodes but not all
)

// exitCode maps an error to the exit code scripts branch on. A failure
// across several nodes is classified by the most telling of their errors:
// refused before not found before unreachable.
func exitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return exitUsage
	}
	var pe *partialError
	var nf nodeFailure
	switch {
	case errors.As(err, &nf):
		return exitFailure
	case errors.As(err, &pe):
		return exitPartial
	case anyError(err, isRefused):
		return exitRefused
	case anyError(err, isNotFound):
		return exitNotFound
	case anyError(err, isUnreachable):
		return exitUnreachable
	}
	return exitFailure
}

// anyError reports whether pred holds for err or any error it wraps,
// following joined errors too.
func anyError(err error, pred func(error) bool) bool {
	if err == nil {
		return false
	}
	if pred(err) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return anyError(u.Unwrap(), pred)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if anyError(e, pred) {
				return true
			}
		}
	}
	return false
}

func wireCode(err error) (wire.Code, bool) {
	if we, ok := err.(*wire.Error); ok {
		return we.Code, true
	}
	return 0, false
}

// isRefused: the peer or this side refused the credential: a TLS alert, a
// certificate that does not verify, or a request the role may not make.
func isRefused(err error) bool {
	if c, ok := wireCode(err); ok {
		return c == wire.CodeNotAuthorized
	}
	var te *quic.TransportError
	if errors.As(err, &te) && te.ErrorCode.IsCryptoError() {
		return true
	}
	switch err.(type) {
	case x509.UnknownAuthorityError, x509.CertificateInvalidError, x509.HostnameError, *tls.CertificateVerificationError:
		return true
	}
	return errors.Is(err, pki.ErrRevoked) || errors.Is(err, routeclient.ErrRefused)
}

func isNotFound(err error) bool {
	c, ok := wireCode(err)
	return ok && (c == wire.CodeNotFound || c == wire.CodeLeaseNotFound)
}

// isUnreachable: no answer in time, or a node that cannot serve now.
func isUnreachable(err error) bool {
	if c, ok := wireCode(err); ok {
		return c == wire.CodeUnavailable || c == wire.CodeWarmingUp || c == wire.CodeOverloaded || c == wire.CodeTimeout
	}
	var idle *quic.IdleTimeoutError
	var hs *quic.HandshakeTimeoutError
	var oe *net.OpError
	var de *net.DNSError
	// A failed listen is this process's own failure (a port in use, an
	// address it may not bind), not an unreachable node.
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &idle) || errors.As(err, &hs) ||
		(errors.As(err, &oe) && oe.Op != "listen") || errors.As(err, &de) || errors.Is(err, nodes.ErrNoNodes) || errors.Is(err, routeclient.ErrNoNodes)
}

// isCobraUsage recognises the usage errors cobra returns as plain errors:
// missing required flags, wrong argument counts, unknown commands.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, prefix := range []string{"required flag", "accepts ", "requires at least", "requires at most", "unknown command", "received "} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

type usageError struct{ error }

// globals are the flags every client command shares.
type globals struct {
	nodes   []string
	data    string
	cert    string
	key     string
	ca      string
	output  string
	timeout string
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "edgereg",
		Short: "A route registry for message brokers on the edge",
		Long: `edgereg does the job of Apache RocketMQ's NameServer over QUIC: brokers register
their topics with every node, clients ask any node where a topic lives.

Every flag can also be set as an environment variable: EDGEREG_ and the flag name
in upper case, dashes as underscores (--nodes is EDGEREG_NODES).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			warnUnknownEnv(cmd.ErrOrStderr(), cmd.Root())
			if err := bindEnv(cmd); err != nil {
				return err
			}
			// Before any command acts: a change made and then refused at
			// printing would exit 2, "nothing done", having done it.
			return g.checkOutput()
		},
	}
	pf := root.PersistentFlags()
	pf.StringSliceVar(&g.nodes, "nodes", []string{node.DefaultAddr}, "node addresses, host:port, comma separated")
	pf.StringVar(&g.data, "data", node.DefaultDataDir, "data directory; client commands find the local CA and operator credentials in DIR/tls")
	pf.StringVar(&g.cert, "cert", "", "client certificate (PEM); default: the local operator credential in --data")
	pf.StringVar(&g.key, "key", "", "client key (PEM), with --cert")
	pf.StringVar(&g.ca, "ca", "", "CA certificate that signed the nodes' certificates (PEM), with --cert")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	pf.StringVar(&g.timeout, "timeout", "10s", "how long a command may take")

	root.AddCommand(
		newVersionCmd(g),
		newNodeCmd(g),
		newBrokerCmd(g),
		newGatewayCmd(g),
		newRouteCmd(g),
		newClustersCmd(g),
		newTopicsCmd(g),
		newTopicCmd(g),
		newKVCmd(g),
		newPermCmd(g),
		newLeasesCmd(g),
		newPolicyCmd(g),
		newCertCmd(g),
		newBenchCmd(g),
		newStatusCmd(g), // status.go
		newPingCmd(g),   // ping.go
	)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	registerCompletions(root)
	root.InitDefaultCompletionCmd() // now rather than at Execute, so the walk below sees it
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes a group of commands (kv, perm, policy,
// cert, topic, completion) refuse an argument that names none of them as a
// usage error: cobra shows the group's help and exits 0 for `edgereg kv
// frob`, which a script would take for success. The group alone still shows
// its help.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if c == c.Root() || !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.SuggestionsMinimumDistance = 2 // cobra sets it on the command it runs only
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += " (did you mean " + strings.Join(s, " or ") + "?)"
		}
		return usageError{errors.New(msg)}
	}
}

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, Go version and protocol (ALPN)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := node.Build()
			return g.emit(cmd.OutOrStdout(), b, func(tw *tabwriter.Writer) {
				tablef(tw, "edgereg %s\ncommit\t%s\ngo\t%s\nplatform\t%s\nprotocol\t%s\n", b.Version, b.Commit, b.GoVersion, b.Platform, strings.Join(b.ALPN, ","))
			})
		},
	}
}

// EnvName returns the environment variable that sets a flag.
func EnvName(flag string) string {
	return "EDGEREG_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// bindEnv sets every flag not given on the command line from its
// environment variable, if that is set.
func bindEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Name == "help" {
			return
		}
		if f.Changed {
			if _, ok := f.Annotations[sourceKey]; !ok {
				setSource(f, "flag --"+f.Name)
			}
			return
		}
		v, ok := os.LookupEnv(EnvName(f.Name))
		if !ok {
			return
		}
		if err = setFlag(f, v); err != nil {
			err = usageError{fmt.Errorf("invalid %s=%q: %w", EnvName(f.Name), v, err)}
			return
		}
		setSource(f, EnvName(f.Name))
	})
	return err
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == ' ' })
}

// stopSignals stop a long-running command (node, broker agent, gateway,
// route --watch) gracefully. SIGHUP is among them: it is what a closed
// terminal or an exiting shell sends its jobs, and Go's default for it is
// to die on the spot, so a broker agent never unregistered and a node
// vanished without a log line. Nothing needs SIGHUP as a reload: the node
// re-reads its credentials, revocations and --policy-dir when they change.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}
