// Command edgereg is the edgereg route registry: one binary for the node,
// brokers, clients and operators. Run `edgereg help` for the commands.
//
// Every flag can also be set by an environment variable: EDGEREG_ followed
// by the flag's name in upper case with dashes as underscores (--nodes is
// EDGEREG_NODES). A flag given on the command line wins.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/edgereg/edgereg/node"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "edgereg:", err)
		os.Exit(exitCode(err))
	}
}

// exitCode is 2 for usage errors and 1 for everything else.
func exitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return 2
	}
	return 1
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
			return bindEnv(cmd)
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
		newVersionCmd(),
		newNodeCmd(g),
		newBrokerCmd(g),
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
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the edgereg version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "edgereg", node.Version)
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
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		v, ok := os.LookupEnv(EnvName(f.Name))
		if !ok {
			return
		}
		if err = setFlag(f, v); err != nil {
			err = usageError{fmt.Errorf("invalid %s=%q: %w", EnvName(f.Name), v, err)}
		}
	})
	return err
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == ' ' })
}
