//go:build race

package wasm

// raceFactor scales the compile child's address-space budget: the race
// detector maps shadow memory for every heap byte.
const raceFactor = 8

// raceSlowdown scales the default compile time limit: code built with the
// race detector (the test binaries, which are also the compile child)
// compiles a 2 MB Go module about ten times slower.
const raceSlowdown = 5
