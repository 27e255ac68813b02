package main

import (
	"strings"
	"testing"

	"github.com/edgereg/edgereg/wire"
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

// TestUnknownOutputFormatChangesNothing: README's exit code 2 is "usage: an
// unknown command or flag, a wrong argument, an invalid setting", which a
// script reads as "nothing was done". -o was checked only when the answer
// was printed: `edgereg -o yaml topic delete orders` deleted the topic on
// every node and then exited 2, and with the nodes away every command
// exited 4 (unreachable) after its timeout instead of 2 at once.
func TestUnknownOutputFormatChangesNothing(t *testing.T) {
	addr, dir := cliNode(t)
	registerBroker(t, addr, dir, &wire.Register{Cluster: "DefaultCluster", BrokerName: "broker-a", Addr: "10.0.0.1:10911",
		DataVersion: wire.DataVersion{Counter: 1},
		Topics:      []wire.TopicConfig{{Name: "orders", ReadQueues: 4, WriteQueues: 4, Perm: 6}}})
	env := []string{"EDGEREG_NODES=" + addr, "EDGEREG_DATA=" + dir}

	for _, args := range [][]string{
		{"-o", "yaml", "topic", "delete", "orders"},
		{"-o", "yaml", "kv", "put", "ns", "k", "v"},
		{"-o", "yaml", "perm", "wipe", "broker-a"},
	} {
		if _, stderr, code := run(t, env, args...); code != 2 || !strings.Contains(stderr, `-o "yaml"`) {
			t.Errorf("edgereg %s: exit %d, stderr %q; want 2 naming -o", strings.Join(args, " "), code, stderr)
		}
	}
	if _, stderr, code := run(t, append(env, "EDGEREG_OUTPUT=yml"), "kv", "put", "ns", "k2", "v"); code != 2 {
		t.Errorf("EDGEREG_OUTPUT=yml kv put: exit %d, stderr %q; want 2", code, stderr)
	}
	if out, stderr, code := run(t, env, "route", "orders"); code != 0 || !strings.Contains(out, "rw-") {
		t.Errorf("after the refused commands, route orders: exit %d, %q %q; want the topic, writable", code, out, stderr)
	}
	for _, key := range []string{"k", "k2"} {
		if _, _, code := run(t, env, "kv", "get", "ns", key); code != exitNotFound {
			t.Errorf("kv get ns %s after a refused put: exit %d, want %d", key, code, exitNotFound)
		}
	}
	// With no node to reach, the setting is still refused, at once.
	if _, stderr, code := run(t, nil, "--nodes", "127.0.0.1:1", "--data", dir, "--timeout", "30s", "-o", "yaml", "topics"); code != 2 {
		t.Errorf("-o yaml topics with no node: exit %d, stderr %q; want 2", code, stderr)
	}
}

// TestNodeModeFlagsComplete: shell completion offers the values of the
// node's mode flags, as it does for --log-level; --policy-route-failure,
// --policy-confirm-failure and --tls-key-exchange offered file names.
func TestNodeModeFlagsComplete(t *testing.T) {
	for flag, want := range map[string][]string{
		"policy-route-failure":   {"open", "closed"},
		"policy-confirm-failure": {"open", "closed"},
		"tls-key-exchange":       {"hybrid", "x25519"},
	} {
		out, stderr, code := run(t, nil, "__complete", "node", "--"+flag, "")
		for _, v := range want {
			if code != 0 || !strings.Contains(out, v+"\n") || !strings.Contains(stderr, "NoFileComp") {
				t.Errorf("completion of --%s: exit %d, %q %q; want %v and no file names", flag, code, out, stderr, want)
				break
			}
		}
	}
}
