package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// applyConfigFile sets every flag not already set on the command line or by
// an environment variable from a config file. The file is a flat YAML map:
// one "flag-name: value" per line, # comments, list values comma separated
// or in [brackets]. Unknown keys are errors, so a typo is not ignored.
func applyConfigFile(fs *pflag.FlagSet, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		key, value, ok, err := parseConfigLine(sc.Text())
		if err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if !ok {
			continue
		}
		fl := fs.Lookup(key)
		if fl == nil || key == "config" || key == "help" {
			return fmt.Errorf("%s:%d: unknown setting %q (settings are the flag names of 'edgereg node --help')", path, line, key)
		}
		if fl.Changed {
			continue // the command line and the environment win
		}
		if err := setFlag(fl, value); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", path, line, key, err)
		}
	}
	return sc.Err()
}

func parseConfigLine(text string) (key, value string, ok bool, err error) {
	text = strings.TrimSpace(text)
	if text == "" || strings.HasPrefix(text, "#") || text == "---" {
		return "", "", false, nil
	}
	key, value, found := strings.Cut(text, ":")
	if !found {
		return "", "", false, fmt.Errorf("want \"name: value\", got %q", text)
	}
	key = strings.TrimSpace(key)
	value = strings.TrimSpace(value)
	if i := strings.Index(value, " #"); i >= 0 {
		value = strings.TrimSpace(value[:i])
	}
	value = strings.Trim(value, `"'`)
	value = strings.TrimSuffix(strings.TrimPrefix(value, "["), "]")
	return key, value, true, nil
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
