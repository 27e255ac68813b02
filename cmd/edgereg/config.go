package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// sourceKey is the flag annotation recording where a flag's value came
// from, for --print-config: "flag --NAME", the variable's name, or
// "FILE:LINE".
const sourceKey = "edgereg.source"

func setSource(f *pflag.Flag, source string) {
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations[sourceKey] = []string{source}
}

// flagSource says where a flag's value came from.
func flagSource(f *pflag.Flag) string {
	if s := f.Annotations[sourceKey]; len(s) == 1 {
		return s[0]
	}
	if f.Changed {
		return "flag --" + f.Name
	}
	return "default"
}

// applyConfigFile sets every flag not already set on the command line or by
// an environment variable from a config file: a YAML map of flag names to
// values, a list value as a YAML sequence or comma separated. Unknown
// settings, nested maps and repeated settings are errors naming the file's
// line, so a typo is not ignored.
func applyConfigFile(fs *pflag.FlagSet, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // an empty file sets nothing
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: want a map of setting: value", path, m.Line)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		at := fmt.Sprintf("%s:%d", path, k.Line)
		key := k.Value
		fl := fs.Lookup(key)
		if key == "config" || key == "help" || key == "print-config" {
			return fmt.Errorf("%s: %s is a command-line flag, not a setting of the config file", at, key)
		}
		if fl == nil {
			return fmt.Errorf("%s: unknown setting %q%s (settings are the flag names of `edgereg node --help`)", at, key, suggest(key, flagNames(fs)))
		}
		if mine, isClient := clientSettings[key]; isClient {
			hint := ""
			if mine != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", mine)
			}
			return fmt.Errorf("%s: %s is a client setting the node does not use%s", at, key, hint)
		}
		if first, dup := seen[key]; dup {
			return fmt.Errorf("%s: %s is set again (first on line %d)", at, key, first)
		}
		seen[key] = k.Line
		value, err := scalarOrList(v)
		if errors.Is(err, errNull) {
			return fmt.Errorf("%s: %s has no value (YAML null: remove the line for the default, or quote the text)", at, key)
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", at, key, err)
		}
		if fl.Changed {
			continue // the command line and the environment win
		}
		if err := setFlag(fl, value); err != nil {
			return fmt.Errorf("%s: %s: %w", at, key, err)
		}
		setSource(fl, at)
	}
	return nil
}

// clientSettings are the root's flags that only the client commands read,
// with the node's own setting for the same thing: in a node's config file
// they would be ignored without a word (--data and --output are the
// node's too).
var clientSettings = map[string]string{
	"cert": "tls-cert", "key": "tls-key", "ca": "tls-client-ca", "nodes": "", "timeout": "",
}

// errNull is a YAML null (`~`, `null`, nothing) where a value belongs:
// taken as its text, `host: ~` named a host "~".
var errNull = errors.New("null value")

func isNull(v *yaml.Node) bool { return v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" }

func scalarOrList(v *yaml.Node) (string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if isNull(v) {
			return "", errNull
		}
		return v.Value, nil
	case yaml.SequenceNode:
		var items []string
		for _, it := range v.Content {
			if isNull(it) {
				return "", errNull
			}
			if it.Kind != yaml.ScalarNode {
				return "", errors.New("want a list of values")
			}
			items = append(items, it.Value)
		}
		return strings.Join(items, ","), nil
	}
	return "", errors.New("want a value or a list")
}

func setFlag(fl *pflag.Flag, value string) error {
	var err error
	if sv, isSlice := fl.Value.(pflag.SliceValue); isSlice {
		err = sv.Replace(splitList(value))
	} else {
		err = fl.Value.Set(value)
	}
	if err == nil {
		fl.Changed = true
	}
	return err
}

func flagNames(fs *pflag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	return names
}

// suggest returns ` (did you mean "X"?)` for the known name closest to a
// mistyped one, or "" if none is close.
func suggest(name string, known []string) string {
	best, bestD := "", 4 // at most 3 edits away
	for _, k := range known {
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// warnUnknownEnv warns about EDGEREG_* variables that set no flag of any
// edgereg command: a mistyped variable would otherwise be ignored silently.
func warnUnknownEnv(w io.Writer, root *cobra.Command) {
	known := map[string]bool{"EDGEREG_TEST_LOG": true, "EDGEREG_CHECK_POLICY_BUILD": true}
	var names []string
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if !known[EnvName(f.Name)] {
					known[EnvName(f.Name)] = true
					names = append(names, EnvName(f.Name))
				}
			})
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	var unknown []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "EDGEREG_") && !known[name] {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	for _, name := range unknown {
		fmt.Fprintf(w, "edgereg: warning: %s sets nothing: no edgereg command has a matching flag%s\n", name, suggest(name, names))
	}
}
