package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestTablesEscapeControlCharacters: KV keys and values may hold any byte,
// and `kv get` / `kv list` printed them raw, so a value stored by anyone
// with write access drove the operator's terminal: ESC sequences cleared
// the screen or set the window title, and \r or \n in a table cell drew
// fake lines; a zone with a C1 control or a bidi override reached `route`
// and `clusters` raw. Table output now shows such strings escaped (\x1b,
// \r, \n, \u009b); -o json stays exact.
func TestTablesEscapeControlCharacters(t *testing.T) {
	addr, dir := cliNode(t)
	env := []string{"EDGEREG_NODES=" + addr, "EDGEREG_DATA=" + dir}
	key, value := "k\x1b]0;owned\x07", "v\r\x1b[2Jfake\nrow\tcell"
	if _, stderr, code := run(t, env, "kv", "put", "ns", key, value); code != 0 {
		t.Fatalf("kv put: exit %d: %s", code, stderr)
	}
	for _, args := range [][]string{{"kv", "get", "ns", key}, {"kv", "list", "ns"}} {
		out, stderr, code := run(t, env, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		if strings.ContainsAny(out, "\x1b\r\x07") || strings.Contains(out, "fake\n") {
			t.Errorf("%v prints a stored control character raw: %q", args, out)
		}
		if !strings.Contains(out, `\x1b[2Jfake\nrow\tcell`) {
			t.Errorf("%v does not show the value escaped: %q", args, out)
		}
	}
	if out, _, _ := run(t, env, "kv", "list", "ns"); !strings.Contains(out, `\x1b]0;owned\a`) {
		t.Errorf("kv list does not show the key escaped: %q", out)
	}

	// Names are refused with control characters (C1 ones too: U+009B is
	// CSI to a terminal honouring them; TestTermSafe shows those escaped),
	// but a zone may hold format characters such as bidi overrides.
	reg := brokerReg("broker-a", "10.0.0.1:10911", "orders")
	reg.Zone = "z\u202e2J\u200f"
	registerBroker(t, addr, dir, reg)
	for _, args := range [][]string{{"route", "orders"}, {"clusters"}} {
		out, stderr, code := run(t, env, args...)
		if code != 0 || strings.Contains(out, reg.Zone) || !strings.Contains(out, `"z\u202e2J\u200f"`) {
			t.Errorf("%v: exit %d, stdout %q (stderr %q), want the zone escaped", args, code, out, stderr)
		}
	}

	out, stderr, code := run(t, env, "kv", "list", "ns", "-o", "json")
	var m map[string]string
	if err := json.Unmarshal([]byte(out), &m); code != 0 || err != nil || m[key] != value {
		t.Errorf("kv list -o json: exit %d, %v, %q (stderr %q), want the value exact", code, err, out, stderr)
	}
	out, _, _ = run(t, env, "kv", "get", "ns", key, "-o", "json")
	if err := json.Unmarshal([]byte(out), &m); err != nil || m["value"] != value || m["key"] != key {
		t.Errorf("kv get -o json: %v, %q, want key and value exact", err, out)
	}
}

// TestTermSafe: printable text is left alone, so ordinary names look as
// they always did; a string with a control character, an invalid UTF-8
// byte or a Unicode format character (a bidi override) is quoted, as is a
// string starting with a quote, so a printable `"\x1b"` cannot pass for
// an escaped one.
func TestTermSafe(t *testing.T) {
	for in, want := range map[string]string{
		"broker-a":    "broker-a",
		"a b/ü:10911": "a b/ü:10911",
		`b \x1b[2J`:   `b \x1b[2J`,
		"":            "",
		"a\x1bb":      `"a\x1bb"`,
		"a\nb":        `"a\nb"`,
		"a\tb":        `"a\tb"`,
		"a\xffb":      `"a\xffb"`,
		"a\u202eb":    `"a\u202eb"`,
		"a\u0085b":    `"a\u0085b"`,
		`"a\x1bb"`:    `"\"a\\x1bb\""`,
	} {
		if got := termSafe(in); got != want {
			t.Errorf("termSafe(%q) = %s, want %s", in, got, want)
		}
	}
}
