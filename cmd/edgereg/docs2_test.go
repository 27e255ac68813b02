package main

import (
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// walkCommands calls fn for cmd and every command below it.
func walkCommands(cmd *cobra.Command, fn func(*cobra.Command)) {
	fn(cmd)
	for _, c := range cmd.Commands() {
		walkCommands(c, fn)
	}
}

// TestHelpNamesEveryFlagsValue: --help shows a placeholder after every flag
// that takes a value (`--addr string`), so a reader can tell it from a
// switch. --policy-route-failure and --policy-confirm-failure were
// registered with pflag's TextVar, whose type name is empty, so help
// printed them bare, like --pprof: `edgereg node --policy-route-failure
// --print-config` then took "--print-config" as the mode.
func TestHelpNamesEveryFlagsValue(t *testing.T) {
	walkCommands(newRootCmd(), func(cmd *cobra.Command) {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.NoOptDefVal != "" {
				return // a switch: bool, or a value with a bare form
			}
			if name, _ := pflag.UnquoteUsage(f); name == "" {
				t.Errorf("%s --%s: help shows no value placeholder (type %q)", cmd.CommandPath(), f.Name, f.Value.Type())
			}
		})
	})
}
