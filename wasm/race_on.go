//go:build race

package wasm

// raceFactor scales the compile child's address-space budget: the race
// detector maps shadow memory for every heap byte.
const raceFactor = 8

// raceSlowdown scales the default compile time limit: code built with the
// race detector (the test binaries, which are also the compile child)
// compiles a 2 MB Go module about ten times slower.
const raceSlowdown = 5

// raceChildOptions are GORACE options for the compile child: a binary
// built with the race detector sleeps 1 s before it exits (atexit_sleep_ms)
// so that late race reports get out, which made every compilation in a
// -race test binary take at least 1 s.
const raceChildOptions = "atexit_sleep_ms=0"
