// Command edgereg is the edgereg route registry: one binary for the node,
// brokers, clients and operators. Run `edgereg help` for the commands.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/edgereg/edgereg/node"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "edgereg:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "edgereg",
		Short:         "A route registry for message brokers on the edge",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the edgereg version",
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "edgereg", node.Version)
		},
	})
	root.AddCommand(&cobra.Command{
		Use:   "node",
		Short: "Run a registry node",
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "edgereg node: the network server is not built yet (see README); the registry core is in node/registry")
		},
	})
	return root
}
