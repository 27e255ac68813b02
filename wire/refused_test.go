package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Refused vectors are inputs a node must refuse (PROTOCOL.md §3.2, §2.2),
// one JSON file each in testdata/wire/refused: what an independent
// implementation checks its decoder against. `go test ./wire -run
// TestRefusedVectors -update` rewrites them from the table below.

const refusedDir = vectorDir + "/refused"

// refusedFile is the on-disk format of one refused vector.
type refusedFile struct {
	Description string `json:"description"`
	// Hex is a whole frame without its length prefix.
	Hex string `json:"hex"`
	// Refused is "frame" when the Frame map itself is refused (a framing
	// error: code 1, type 0, id 0) and "body" when the frame decodes but
	// its body is refused (code 1 with the request's type and id).
	Refused string `json:"refused"`
	// Rule names the rule of §3.2 broken.
	Rule string `json:"rule"`
}

type refusedVector struct {
	name string
	file refusedFile
}

func refusedTable() []refusedVector {
	v := func(name, refused, rule, desc, hexFrame string) refusedVector {
		return refusedVector{name, refusedFile{Description: desc, Hex: strings.ReplaceAll(hexFrame, " ", ""), Refused: refused, Rule: rule}}
	}
	const dup = "no duplicate map keys"
	return []refusedVector{
		v("duplicate-key-in-body", "body", dup, "kv-get request (type 24, id 1) whose body names key 1 twice",
			"a3 01 1818 02 01 03 a2 01 626e73 01 626e73"),
		v("duplicate-key-inside-unknown-body-field", "body", dup, "get-routes request (type 10, id 1) whose body has an unknown key 9 holding a map with key 1 twice",
			"a3 01 0a 02 01 03 a2 01 81 a1 01 6174 09 a2 01 00 01 01"),
		// Body vectors use types that take a body: a node does not decode
		// the body of a type that takes none, such as ping, so it never
		// looks for a duplicate there (PROTOCOL.md 5).
		v("duplicate-key-deep-in-unknown-body-field", "body", dup, "get-routes request (type 10, id 1) for topic \"t\" whose body's unknown key 9 holds an array of a map of a map with text key \"x\" twice",
			"a3 01 0a 02 01 03 a2 01 81 a1 01 6174 09 81 a1 01 a2 6178 00 6178 01"),
		v("duplicate-integer-key-of-two-widths", "body", dup, "get-routes request (type 10, id 1) for topic \"t\" whose body's unknown key 9 holds a map with key 1 encoded as 0x01 and as 0x18 0x01: the same key",
			"a3 01 0a 02 01 03 a2 01 81 a1 01 6174 09 a2 01 00 1801 01"),
		v("duplicate-key-in-embedded-input", "body", dup, "policy-test request (type 34, id 1) whose Input (an embedded item) has key 1 twice",
			"a3 01 1822 02 01 03 a3 01 65726f757465 02 40 03 a2 01 01 01 02"),
		v("duplicate-key-inside-unknown-frame-field", "frame", dup, "ping request (type 17, id 1) whose Frame map has an unknown key 9 holding a map with key 1 twice: a framing error",
			"a3 01 11 02 01 09 a2 01 01 01 02"),
		v("duplicate-frame-key", "frame", dup, "Frame map naming key 1 (type) twice",
			"a3 01 11 02 01 01 11"),
		v("tag-in-unknown-body-field", "frame", "no tags", "ping request (type 17, id 1) whose body's unknown key 9 holds a tagged item: tags are refused anywhere in a frame",
			"a3 01 11 02 01 03 a1 09 c1 00"),
		v("indefinite-length-body", "frame", "definite lengths only", "ping request (type 17, id 1) whose body is an indefinite-length map",
			"a3 01 11 02 01 03 bf ff"),
	}
}

func TestRefusedVectors(t *testing.T) {
	table := refusedTable()
	if *update {
		writeRefused(t, table)
	}
	paths, err := filepath.Glob(filepath.Join(refusedDir, "*.json"))
	if err != nil || len(paths) != len(table) {
		t.Fatalf("%d refused vectors in %s, the table has %d: run go test ./wire -run TestRefusedVectors -update (%v)", len(paths), refusedDir, len(table), err)
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var rf refusedFile
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&rf); err != nil {
				t.Fatal(err)
			}
			b, err := hex.DecodeString(rf.Hex)
			if err != nil {
				t.Fatal(err)
			}
			var f Frame
			err = DecodeFrame(b, &f)
			if rf.Refused == "frame" {
				if err == nil {
					t.Fatalf("DecodeFrame accepted it: %+v", f)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeFrame: %v (the body, not the frame, is to be refused)", err)
			}
			body := messageBodies[f.Type].req
			if body == nil {
				body = factory[Pong]() // a type without a request body: any body struct
			}
			if err := f.DecodeBody(body()); err == nil {
				t.Fatal("DecodeBody accepted it")
			} else if !strings.Contains(err.Error(), "malformed") {
				t.Errorf("DecodeBody: %v", err)
			}
		})
	}
}

func writeRefused(t *testing.T, table []refusedVector) {
	t.Helper()
	if err := os.MkdirAll(refusedDir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(refusedDir, "*.json"))
	for _, p := range old {
		os.Remove(p)
	}
	for _, v := range table {
		out, err := json.MarshalIndent(v.file, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(refusedDir, v.name+".json"), append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
