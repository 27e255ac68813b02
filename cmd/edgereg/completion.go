package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
)

// registerCompletions adds value completion to flags every command shares
// or several commands have: -o, --hook, --log-format, --log-level, and
// the node's mode flags. Cobra's
// `edgereg completion bash|zsh|fish|powershell` prints the shell script.
func registerCompletions(root *cobra.Command) {
	fixed := func(values ...string) cobra.CompletionFunc {
		return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
	}
	root.RegisterFlagCompletionFunc("output", fixed("table", "json"))
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for name, values := range map[string][]string{
			"hook":       {"route", "expiry", "confirm"},
			"log-format": {"auto", "text", "json"},
			"log-level":  {"debug", "info", "warn", "error"},
			// the node's modes
			"policy-route-failure":   {"open", "closed"},
			"policy-confirm-failure": {"closed", "open"},
			"tls-key-exchange":       {"hybrid", "x25519"},
		} {
			if c.LocalNonPersistentFlags().Lookup(name) != nil {
				if _, ok := c.GetFlagCompletionFunc(name); !ok {
					c.RegisterFlagCompletionFunc(name, fixed(values...))
				}
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completeTopics completes topic names from the first node of --nodes that
// answers within two seconds; names already on the command line are left
// out. Without a node it offers nothing rather than failing.
func completeTopics(g *globals) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if err := bindEnv(cmd); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		var topics []string
		g.withAnyNode(ctx, func(c *client.Conn) (err error) {
			topics, err = c.Topics(ctx, wire.TopicsQuery{Kind: wire.TopicsAll})
			return err
		})
		var out []cobra.Completion
		for _, t := range topics {
			if strings.HasPrefix(t, toComplete) && !slices.Contains(args, t) {
				out = append(out, t)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
