//go:build !race

package wasm

// raceFactor scales the compile child's address-space budget (8 under the
// race detector, which maps shadow memory for every heap byte).
const raceFactor = 1

// raceSlowdown scales the default compile time limit: code built with the
// race detector (the test binaries, which are also the compile child)
// compiles a 2 MB Go module about ten times slower.
const raceSlowdown = 1

// raceChildOptions are GORACE options for the compile child; none without
// the race detector.
const raceChildOptions = ""
