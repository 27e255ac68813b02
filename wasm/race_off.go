//go:build !race

package wasm

// raceFactor scales the compile child's address-space budget (8 under the
// race detector, which maps shadow memory for every heap byte).
const raceFactor = 1
