package main

import (
	"bufio"
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// applyContainerMemoryLimit sets Go's soft memory limit to 90 % of the
// memory limit of the node's cgroup (a container's), unless GOMEMLIMIT is
// set. Without it the collector lets the heap grow to twice what is live
// before it collects: a node holding 10,000 broker connections and a
// million (topic, group) entries reached 1.18-1.32 GB of RSS, and under a
// 1 GiB container limit the kernel would kill it; with a soft limit of
// 900 MiB it peaked at 936 MB. The rest of the limit is for goroutine
// stacks and the runtime. Nothing changes where no limit is set. The
// gateway takes it too.
func applyContainerMemoryLimit(log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit, file, ok := cgroupMemoryLimit("/proc/self/cgroup", "/sys/fs/cgroup")
	if !ok {
		return
	}
	soft := limit / 10 * 9
	debug.SetMemoryLimit(soft)
	log.Info("soft memory limit from the container's", "container_limit", limit, "gomemlimit", soft, "from", file)
}

// cgroupMemoryLimit returns the memory limit, in bytes, of the cgroup that
// procCgroup (/proc/self/cgroup) names, under root (/sys/fs/cgroup):
// memory.max for cgroup v2, memory/memory.limit_in_bytes for v1. A
// cgroup namespace makes the path "/", with the limit at the top of root.
// No limit ("max", or v1's page-rounded maximum) or no file: ok is false.
func cgroupMemoryLimit(procCgroup, root string) (limit int64, file string, ok bool) {
	b, err := os.ReadFile(procCgroup)
	if err != nil {
		return 0, "", false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var candidates []string
		switch {
		case parts[0] == "0" && parts[1] == "": // v2
			candidates = []string{filepath.Join(root, parts[2], "memory.max"), filepath.Join(root, "memory.max")}
		case hasController(parts[1], "memory"): // v1
			candidates = []string{filepath.Join(root, "memory", parts[2], "memory.limit_in_bytes"), filepath.Join(root, "memory", "memory.limit_in_bytes")}
		default:
			continue
		}
		for _, f := range candidates {
			if v, found := readLimit(f); found {
				if v > 0 && v < 1<<62 { // v1 writes about 2^63 for none
					return v, f, true
				}
				break // this hierarchy says: no limit
			}
		}
	}
	return 0, "", false
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readLimit reads a cgroup limit file: found is false when it cannot be
// read; "max" is found, with 0.
func readLimit(file string) (v int64, found bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, true
	}
	v, err = strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}
