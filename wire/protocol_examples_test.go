package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestProtocolExamples holds PROTOCOL.md's worked examples (section 14) and
// its route version example (section 9) to the test vectors they name,
// byte for byte: a client author reads the annotated dumps, not the JSON.
// Each dump's bytes are its lines' leading hex tokens; a dump is the
// whole vector of the file named last before it, or, when it ends in "…"
// or does not start with the vector, a part of that vector's bytes. Each
// "Hex: `…`" line is the whole vector.
func TestProtocolExamples(t *testing.T) {
	doc, err := os.ReadFile("PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	vectors := map[string][]byte{}
	for _, lv := range loadVectors(t) {
		vectors[lv.name+".json"] = lv.cbor
	}
	_, sec, ok := strings.Cut(string(doc), "\n## 14. Worked examples\n")
	if !ok {
		t.Fatal("PROTOCOL.md has no section 14")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	fileRE := regexp.MustCompile("`(?:testdata/wire/)?([a-z0-9-]+\\.json)`")
	hexRE := regexp.MustCompile("Hex: `([0-9a-f]+)`")
	hexTok := regexp.MustCompile(`^[0-9a-f]+$`)
	var file string
	want := func() []byte {
		t.Helper()
		v, ok := vectors[file]
		if !ok {
			t.Fatalf("section 14 names %q, which is not a vector", file)
		}
		return v
	}
	var dump []byte
	inBlock, partial, dumps, hexes := false, false, 0, 0
	for _, line := range strings.Split(sec, "\n") {
		if strings.HasPrefix(line, "```") {
			if inBlock && len(dump) > 0 {
				dumps++
				v := want()
				switch {
				case !partial && bytes.HasPrefix(v, dump[:min(4, len(dump))]) && !bytes.Equal(dump, v):
					t.Errorf("section 14's dump of %s is\n%x\nthe vector is\n%x", file, dump, v)
				case !bytes.Contains(v, dump):
					t.Errorf("section 14's dump for %s, %x, is not part of the vector %x", file, dump, v)
				}
			}
			inBlock, partial, dump = !inBlock, false, nil
			continue
		}
		if inBlock {
			for _, tok := range strings.Fields(line) {
				if tok == "…" {
					partial = true
					break
				}
				if !hexTok.MatchString(tok) || len(tok)%2 != 0 {
					break
				}
				b, _ := hex.DecodeString(tok)
				dump = append(dump, b...)
			}
			continue
		}
		if m := hexRE.FindStringSubmatch(line); m != nil {
			hexes++
			if got, _ := hex.DecodeString(m[1]); !bytes.Equal(got, want()) {
				t.Errorf("section 14 gives %s as %s, the vector is %x", file, m[1], want())
			}
		}
		if ms := fileRE.FindAllStringSubmatch(line, -1); ms != nil {
			file = ms[len(ms)-1][1]
		}
	}
	if dumps < 5 || hexes < 2 {
		t.Errorf("section 14: read %d dumps and %d hex lines, want at least 5 and 2", dumps, hexes)
	}

	// Section 9: route.json's size, SHA-256 and version.
	route := vectors["route.json"]
	sum := sha256.Sum256(route)
	version := binary.BigEndian.Uint64(sum[:8])
	text := "the route of `testdata/wire/route.json` (" + strconv.Itoa(len(route)) + " bytes) has SHA-256\n`" +
		hex.EncodeToString(sum[:8]) + "…`, so its version is `0x" + hex.EncodeToString(sum[:8]) + "` =\n" + strconv.FormatUint(version, 10) + "."
	if !bytes.Contains(doc, []byte(text)) {
		t.Errorf("section 9's version example does not read %q", text)
	}
	if v := RouteVersion(route); v != version {
		t.Errorf("route.json's version is %d, want %d", v, version)
	}
}
