package datadir

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// crashChildEnv names the file a child process of TestKill9KeepsWhatWasAcknowledged
// rewrites until it is killed.
const crashChildEnv = "EDGEREG_DATADIR_CRASH_CHILD"

// record is the i-th content the child writes: the number on the first
// line, then 64 KiB of its last digit, so a torn or mixed file shows.
func record(i int) []byte {
	n := strconv.Itoa(i)
	return append([]byte(n+"\n"), bytes.Repeat([]byte{n[len(n)-1]}, 64<<10)...)
}

// parseRecord returns the number of a whole record, or an error.
func parseRecord(b []byte) (int, error) {
	head, _, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return 0, fmt.Errorf("no first line in %d bytes", len(b))
	}
	i, err := strconv.Atoi(string(head))
	if err != nil {
		return 0, fmt.Errorf("first line %q: %w", head, err)
	}
	if !bytes.Equal(b, record(i)) {
		return 0, fmt.Errorf("record %d is torn or mixed (%d bytes)", i, len(b))
	}
	return i, nil
}

// TestCrashChild is the child's body: it acknowledges each write (prints
// its number) only after WriteFile returned.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		t.Skip("only run as TestKill9KeepsWhatWasAcknowledged's child")
	}
	start := 1
	if b, err := os.ReadFile(path); err == nil {
		if i, err := parseRecord(b); err == nil {
			start = i + 1
		}
	}
	for i := start; ; i++ {
		if err := WriteFile(path, record(i), 0o600); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(i)
	}
}

// TestKill9KeepsWhatWasAcknowledged kills (SIGKILL) a process rewriting a
// file in a loop, five times at a random moment, and restarts it on the
// same directory. After each kill the file holds one whole record, never
// older than the last one acknowledged (WriteFile returned) and at most
// the one in flight; CleanTemps, as a node calls it at start, leaves no
// temporary file of the killed writes behind (before, each kill in the
// middle of a write left one, for ever).
func TestKill9KeepsWhatWasAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "kvconfig.json")
	for round := range 5 {
		if err := CleanTemps(dir); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := 0
		lines := bufio.NewScanner(out)
		want := 20 + 17*round // acknowledgements before the kill
		deadline := time.Now().Add(15 * time.Second)
		for n := 0; n < want && time.Now().Before(deadline) && lines.Scan(); n++ {
			line := lines.Text()
			i, err := strconv.Atoi(line)
			if err != nil {
				t.Fatalf("round %d: child said %q", round, line)
			}
			acked = i
		}
		cmd.Process.Kill()
		// The child may have acknowledged more than was read before the
		// kill: those lines are still in the pipe.
		for lines.Scan() {
			if i, err := strconv.Atoi(lines.Text()); err == nil {
				acked = i
			}
		}
		cmd.Wait()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		got, err := parseRecord(b)
		switch {
		case err != nil:
			t.Fatalf("round %d: after kill -9: %v", round, err)
		case got < acked:
			t.Fatalf("round %d: the file holds record %d, but %d was acknowledged", round, got, acked)
		case got > acked+1:
			t.Fatalf("round %d: the file holds record %d, past the one in flight (%d acknowledged)", round, got, acked)
		}
		left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
		t.Logf("round %d: %d acknowledged, file holds %d, %d temporary files left by the kill", round, acked, got, len(left))
	}
	if err := CleanTemps(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 1 {
		t.Errorf("after CleanTemps the directory holds %s, want only kvconfig.json", strings.Join(names, ", "))
	}
}

// TestCleanTempsRemovesOnlyTemps: the node's own files, a lock, a file
// that merely looks alike and a directory stay.
func TestCleanTempsRemovesOnlyTemps(t *testing.T) {
	dir := t.TempDir()
	keep := []string{"kvconfig.json", "node-id", ".lock", ".tmp123", ".x.tmp", ".x.tmpabc", "x.tmp123", "tls/ca.crt"}
	drop := []string{".kvconfig.json.tmp123", "tls/.node.key.tmp9"}
	for _, f := range append(keep, drop...) {
		p := filepath.Join(dir, f)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(dir, ".sub.tmp1"), 0o700)
	if err := CleanTemps(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range append(keep, ".sub.tmp1") {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s removed: %v", f, err)
		}
	}
	for _, f := range drop {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s left", f)
		}
	}
	if err := CleanTemps(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("a missing directory: %v", err)
	}
}
