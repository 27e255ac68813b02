//go:build race

package wasm

// raceFactor scales the compile child's address-space budget: the race
// detector maps shadow memory for every heap byte.
const raceFactor = 8
