//go:build !unix

package wasm

import "os/exec"

// limitAddressSpace is a no-op where RLIMIT_AS does not exist; the
// compile child is then bounded in time only.
func limitAddressSpace(int64) error { return nil }

func childPeakRSS(*exec.Cmd) int64 { return 0 }
