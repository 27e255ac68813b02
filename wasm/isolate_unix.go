//go:build unix

package wasm

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// limitAddressSpace caps the process's address space at what it uses now
// plus budget bytes, so a compilation that needs more fails its
// allocation (and the child dies) instead of growing without bound.
func limitAddressSpace(budget int64) error {
	used, err := addressSpaceInUse()
	if err != nil {
		return err
	}
	lim := uint64(used + budget)
	return syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: lim, Max: lim})
}

// addressSpaceInUse reads VmSize from /proc/self/status.
func addressSpaceInUse() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("address space limit: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmSize:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("address space limit: VmSize %q", v)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("address space limit: no VmSize in /proc/self/status")
}

// childPeakRSS returns a finished child's peak resident set size.
func childPeakRSS(cmd *exec.Cmd) int64 {
	if cmd.ProcessState == nil {
		return 0
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return int64(ru.Maxrss) << 10 // kilobytes on Linux
	}
	return 0
}
