package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgereg/edgereg/wasm"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
)

func newPolicyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Manage WebAssembly policy modules on every node",
		Long: `Manage the WebAssembly policies that filter routes (hook route), decide how long
a broker may stay silent (hook expiry) and confirm expiries (hook confirm).
push, rollback and rm go to every node in --nodes and report each node's result;
ls lists every node; test runs a module once on one node and activates nothing.`,
	}
	var hook string
	hookFlag := func(c *cobra.Command) {
		c.Flags().StringVar(&hook, "hook", "", "route, expiry or confirm (required)")
		c.MarkFlagRequired("hook")
		// A wrong hook is a usage error, found before anything is sent.
		c.PreRunE = func(*cobra.Command, []string) error {
			if _, err := wasm.ParseHook(hook); err != nil {
				return usageError{fmt.Errorf("--hook: %w", err)}
			}
			return nil
		}
	}
	push := &cobra.Command{
		Use: "push FILE --hook H", Short: "Validate and activate a module on every node", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			module, err := readModuleFile(a[0])
			if err != nil {
				return err
			}
			return g.everyNode(cmd, func(c *client.Conn, ctx contextT) (any, error) {
				info, err := c.PolicyPush(ctx, hook, module)
				if err != nil {
					return nil, err // no summary beside the node's refusal
				}
				return policySummary(info), nil
			})
		},
	}
	rollback := &cobra.Command{
		Use: "rollback --hook H", Short: "Restore a hook's previous module on every node", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.everyNode(cmd, func(c *client.Conn, ctx contextT) (any, error) {
				info, err := c.PolicyRollback(ctx, hook)
				if err != nil {
					return nil, err // no summary beside the node's refusal
				}
				return policySummary(info), nil
			})
		},
	}
	rm := &cobra.Command{
		Use: "rm --hook H", Aliases: []string{"remove"}, Short: "Return a hook to the built-in behaviour on every node", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.everyNode(cmd, func(c *client.Conn, ctx contextT) (any, error) {
				info, err := c.PolicyRemove(ctx, hook)
				if err != nil {
					return nil, err // no summary beside the node's refusal
				}
				return policySummary(info), nil
			})
		},
	}
	for _, c := range []*cobra.Command{push, rollback, rm} {
		hookFlag(c)
	}
	cmd.AddCommand(push, rollback, rm, newPolicyLsCmd(g), newPolicyTestCmd(g))
	return cmd
}

// readModuleFile reads the module to send: a regular file within the
// module cap, so a FIFO or /dev/zero is refused rather than read forever,
// and an oversized file is refused before anything is sent.
func readModuleFile(path string) ([]byte, error) { return wasm.ReadModuleFile(path) }

// policySummary is what push, rollback and rm print per node.
func policySummary(info wire.PolicyInfo) string {
	if info.Hash == "" {
		return info.Hook + ": built-in behaviour"
	}
	return fmt.Sprintf("%s: %.12s (%d bytes)", info.Hook, info.Hash, info.Size)
}

// nodePolicies is one node's policy list.
type nodePolicies struct {
	Node     string      `json:"node"`
	Error    string      `json:"error,omitempty"`
	Policies []policyOut `json:"policies,omitempty"`
}

// policyOut is one hook's policy as -o json prints it: snake_case, the
// activation time in RFC 3339 like every other time the CLI prints.
type policyOut struct {
	Hook         string            `json:"hook"`
	Hash         string            `json:"hash,omitempty"`
	Size         int               `json:"size,omitempty"`
	ActivatedAt  *time.Time        `json:"activated_at,omitempty"`
	Calls        uint64            `json:"calls"`
	Errors       uint64            `json:"errors"`
	Fallbacks    uint64            `json:"fallbacks"`
	P50Micros    int64             `json:"p50_us"`
	P99Micros    int64             `json:"p99_us"`
	LastGoodHash string            `json:"last_good_hash,omitempty"`
	Modules      []policyModuleOut `json:"modules,omitempty"`
	// SavedHash is a saved module not in use: being restored, or, with
	// SavedError, one the node could not restore at its start.
	SavedHash  string `json:"saved_hash,omitempty"`
	SavedError string `json:"saved_error,omitempty"`
}

type policyModuleOut struct {
	Hash        string `json:"hash"`
	State       string `json:"state"`
	Calls       uint64 `json:"calls"`
	Errors      uint64 `json:"errors"`
	Fallbacks   uint64 `json:"fallbacks"`
	Deactivated string `json:"deactivated,omitempty"`
}

func newPolicyOut(p wire.PolicyInfo) policyOut {
	out := policyOut{Hook: p.Hook, Hash: p.Hash, Size: p.Size, Calls: p.Calls, Errors: p.Errors, Fallbacks: p.Fallbacks,
		P50Micros: p.P50Micros, P99Micros: p.P99Micros, LastGoodHash: p.LastGoodHash,
		SavedHash: p.SavedHash, SavedError: p.SavedError}
	if p.ActivatedAtMs != 0 {
		at := time.UnixMilli(p.ActivatedAtMs).UTC()
		out.ActivatedAt = &at
	}
	for _, m := range p.Modules {
		out.Modules = append(out.Modules, policyModuleOut(m))
	}
	return out
}

func newPolicyLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "ls", Aliases: []string{"list"}, Short: "List every node's policies with their call statistics", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel, err := g.context(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			results, runErr := g.withEveryNode(ctx, func(c *client.Conn) (any, error) { return c.PolicyList(ctx) })
			var out []nodePolicies
			for _, r := range results {
				np := nodePolicies{Node: r.Node, Error: r.Error}
				infos, _ := r.Value.([]wire.PolicyInfo)
				for _, p := range infos {
					np.Policies = append(np.Policies, newPolicyOut(p))
				}
				out = append(out, np)
			}
			if err := g.emit(cmd.OutOrStdout(), out, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "NODE\tHOOK\tHASH\tSIZE\tACTIVATED\tCALLS\tERRORS\tFALLBACKS\tP50\tP99")
				for _, np := range out {
					if np.Error != "" {
						tablef(tw, "%s\terror: %s\n", np.Node, np.Error)
					}
					for _, p := range np.Policies {
						printPolicy(tw, np.Node, p)
					}
				}
			}); err != nil {
				return err
			}
			return runErr
		},
	}
}

func printPolicy(tw *tabwriter.Writer, node string, p policyOut) {
	if p.Hash == "" {
		tablef(tw, "%s\t%s\t(built-in)\t\t\t\t\t\t\t\n", node, p.Hook)
		// A saved module not in use: the hook runs built-in until a start
		// restores it, a push replaces it or rm drops it.
		switch {
		case p.SavedHash != "" && p.SavedError != "":
			tablef(tw, "%s\t  saved\t%.12s\t\tnot restored: %s\t\t\t\t\t\n", node, p.SavedHash, p.SavedError)
		case p.SavedHash != "":
			tablef(tw, "%s\t  saved\t%.12s\t\trestoring\t\t\t\t\t\n", node, p.SavedHash)
		}
	} else {
		activated := ""
		if p.ActivatedAt != nil {
			activated = p.ActivatedAt.Format(time.RFC3339)
		}
		tablef(tw, "%s\t%s\t%.12s\t%d\t%s\t%d\t%d\t%d\t%dµs\t%dµs\n", node, p.Hook, p.Hash, p.Size,
			activated, p.Calls, p.Errors, p.Fallbacks, p.P50Micros, p.P99Micros)
	}
	// The other modules the node remembers keep their counters, so a
	// deactivated module's errors stay visible after a restore.
	for _, m := range p.Modules {
		if m.State == "active" {
			continue
		}
		tablef(tw, "%s\t  %s\t%.12s\t\t%s\t%d\t%d\t%d\t\t\n", node, m.State, m.Hash, m.Deactivated, m.Calls, m.Errors, m.Fallbacks)
	}
}

func newPolicyTestCmd(g *globals) *cobra.Command {
	var hook, inputFile string
	cmd := &cobra.Command{
		Use:   "test FILE --hook H [--input FILE]",
		Short: "Run a module's hook once on a node, activating nothing",
		Long: `Validate a module on a node and run one hook once. --input names a file with the
hook's input, as JSON with the field names of wasm/ABI.md (for example
{"broker": {...}, "stats": {"jitter_ms": 2500}, "default_ms": 120000}) or as
CBOR; without it the node's built-in sample input is used. Prints the hook's
checked output with the ABI's field names, and the call time.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			module, err := readModuleFile(a[0])
			if err != nil {
				return err
			}
			h, err := wasm.ParseHook(hook)
			if err != nil {
				return usageError{fmt.Errorf("--hook: %w", err)}
			}
			var input []byte
			if inputFile != "" {
				if input, err = readPolicyInput(h, inputFile); err != nil {
					return err
				}
			}
			return g.readOne(cmd, func(c *client.Conn, ctx contextT) (any, error) {
				res, err := c.PolicyTest(ctx, h.String(), module, input)
				if err != nil {
					return nil, err
				}
				output, err := wasm.OutputJSON(h, res.Output)
				if err != nil {
					return nil, fmt.Errorf("decode output: %w", err)
				}
				return map[string]any{"node": c.Addr(), "hash": res.Hash, "duration_us": res.DurationUs, "output": output}, nil
			}, func(tw *tabwriter.Writer, v any) {
				m := v.(map[string]any)
				out, _ := json.Marshal(m["output"])
				tablef(tw, "module %.12s on %s: %s in %dµs\n", m["hash"], m["node"], out, m["duration_us"])
			})
		},
	}
	cmd.Flags().StringVar(&hook, "hook", "", "route, expiry or confirm (required)")
	cmd.Flags().StringVar(&inputFile, "input", "", "a file with the hook's input: JSON with wasm/ABI.md's field names, or CBOR")
	cmd.MarkFlagRequired("hook")
	return cmd
}

// readPolicyInput reads a hook's input for policy test: JSON (it starts
// with "{") with wasm/ABI.md's field names, or CBOR as is.
func readPolicyInput(h wasm.Hook, path string) ([]byte, error) {
	b, err := wasm.ReadInputFile(path)
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		return wasm.InputFromJSON(h, t)
	}
	return b, nil
}
