package remoting

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The writers below produce what fastjson 1.2.x writes for RocketMQ's
// objects: fields in alphabetical order, no whitespace (rocketmq-client-go
// parses brokerAddrs by string surgery and keeps any space it finds),
// nulls omitted. They append to dst and never fail.

// Dialect selects how maps with integer keys (brokerAddrs) and strings are
// written.
type Dialect int

const (
	// Legacy is fastjson's default: integer map keys bare ({0:"a"}), which is
	// not JSON. RocketMQ writes it for route requests below V4_9_4 — that is,
	// for rocketmq-client-go — and for cluster info and member groups always.
	Legacy Dialect = iota
	// Standard is fastjson with BrowserCompatible: keys quoted ({"0":"a"}),
	// '/' written as "\/" and non-ASCII as \uXXXX.
	Standard
)

// RouteDialect is the dialect a NameServer answers GET_ROUTEINFO_BY_TOPIC
// in, from the request's version and its optional acceptStandardJsonOnly.
func RouteDialect(req *Command) Dialect {
	// Java reads the flag with Boolean.parseBoolean: "true" in any case.
	if req.Version >= V4_9_4 || strings.EqualFold(req.ExtFields["acceptStandardJsonOnly"], "true") {
		return Standard
	}
	return Legacy
}

const hexDigits = "0123456789ABCDEF"

// appendString appends s as a JSON string.
func appendString(dst []byte, s string, d Dialect) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '/' && d == Standard:
				dst = append(dst, '\\', '/')
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c == '\b':
				dst = append(dst, '\\', 'b')
			case c == '\f':
				dst = append(dst, '\\', 'f')
			case c < 0x20 || c == 0x7f:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case d == Standard, r < 0xA0, r == '\u2028', r == '\u2029':
			// BrowserCompatible escapes everything from 127 up; fastjson's
			// default escapes C1 controls and the JavaScript line
			// separators (SerializeWriter's special characters).
			dst = appendUTF16Escape(dst, r)
		case r == utf8.RuneError && size == 1:
			dst = append(dst, "\uFFFD"...) // invalid UTF-8 would make the JSON invalid
		default:
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

func appendUTF16Escape(dst []byte, r rune) []byte {
	u := func(v rune) {
		dst = append(dst, '\\', 'u', hexDigits[v>>12&15], hexDigits[v>>8&15], hexDigits[v>>4&15], hexDigits[v&15])
	}
	if r >= 0x10000 {
		r -= 0x10000
		u(0xD800 + (r>>10)&0x3FF)
		u(0xDC00 + r&0x3FF)
		return dst
	}
	u(r)
	return dst
}

// appendKey appends "name": (field names are ASCII identifiers).
func appendKey(dst []byte, name string) []byte {
	dst = append(dst, '"')
	dst = append(dst, name...)
	return append(dst, '"', ':')
}

func appendInt(dst []byte, v int64) []byte { return strconv.AppendInt(dst, v, 10) }

func appendBool(dst []byte, v bool) []byte { return strconv.AppendBool(dst, v) }

// appendStringMap appends a map[string]string with its keys sorted.
func appendStringMap(dst []byte, m map[string]string, d Dialect) []byte {
	dst = append(dst, '{')
	for i, k := range sortedKeys(m) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, k, d)
		dst = append(dst, ':')
		dst = appendString(dst, m[k], d)
	}
	return append(dst, '}')
}

// appendStrings appends a JSON array of strings.
func appendStrings(dst []byte, list []string, d Dialect) []byte {
	dst = append(dst, '[')
	for i, s := range list {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, s, d)
	}
	return append(dst, ']')
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// QuoteBareKeys rewrites fastjson's legacy bare integer map keys ({0:"a"})
// as JSON strings ({"0":"a"}) so that encoding/json can read the result.
// Text that is already JSON comes back unchanged (a copy). It does not
// validate: a malformed input stays malformed for the JSON decoder to report.
func QuoteBareKeys(b []byte) []byte {
	out := make([]byte, 0, len(b)+8)
	inString, escaped, expectKey := false, false, false
	var stack []byte // 'o' for an object, 'a' for an array
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			out = append(out, c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch {
		case c == '"':
			inString, expectKey = true, false
			out = append(out, c)
		case c == '{':
			stack = append(stack, 'o')
			expectKey = true
			out = append(out, c)
		case c == '[':
			stack = append(stack, 'a')
			expectKey = false
			out = append(out, c)
		case c == '}' || c == ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			expectKey = false
			out = append(out, c)
		case c == ',':
			expectKey = len(stack) > 0 && stack[len(stack)-1] == 'o'
			out = append(out, c)
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			out = append(out, c)
		case expectKey && (c == '-' || (c >= '0' && c <= '9')):
			j := i + 1
			for j < len(b) && b[j] >= '0' && b[j] <= '9' {
				j++
			}
			out = append(out, '"')
			out = append(out, b[i:j]...)
			out = append(out, '"')
			i = j - 1
			expectKey = false
		default:
			expectKey = false
			out = append(out, c)
		}
	}
	return out
}

// isJSONSpace reports whether b holds only JSON whitespace.
func isJSONSpace(b []byte) bool { return len(bytes.TrimSpace(b)) == 0 }
