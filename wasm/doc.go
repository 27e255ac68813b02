// Package wasm hosts edgereg's WebAssembly policies on wazero.
//
// A policy is a WebAssembly module that implements one or more hooks of the
// ABI written down in ABI.md (version 1): route filtering, expiry thresholds
// and expiry confirmation. Data crosses the boundary as CBOR maps with
// integer keys through the guest's linear memory; time and randomness come in
// the input, so the guest needs no clock or entropy of its own.
//
// The pieces, from the bottom up:
//
//   - Host owns one wazero Runtime (with an on-disk compilation cache) and
//     turns module bytes into a validated, compiled *Module: size cap,
//     SHA-256 identity, structural limits checked on the bytes
//     (structure.go), compilation in a child process under memory and time
//     limits (isolate.go), import allow-list, exact export signatures, ABI
//     version, declared memory within the cap and a dry run of every hook on
//     built-in sample inputs.
//   - Every call runs on an instance taken from the module's bounded pool
//     for that hook, prepared off the call path and within a node-wide
//     instance budget, under a deadline (the runtime closes an instance
//     whose context is done) and a memory cap; an instance that trapped,
//     timed out or returned something invalid is closed and never reused.
//     Outputs are checked by the host: a filtered route must be present and
//     a subset of its input, thresholds must be in range, confirmations must
//     be valid unique indexes.
//   - Set holds the active module of each hook behind an atomic pointer, so
//     activation, rollback and removal never fail a concurrent call. A failed
//     call falls back to the built-in behaviour; after a run of consecutive
//     failures, or too many in a window, the Set restores the last module
//     that worked on real traffic by itself.
//     Set implements registry.Thresholds and registry.ExpiryConfirmer, and
//     memoizes route filtering.
//   - Store persists the active modules in a directory and LoadDir reads the
//     modules an operator mounts from a Kubernetes ConfigMap.
//
// Lock order: Set.mu before Host.mu; pools and caches have leaf locks
// only (a pool sends to its own idle channel under its lock, which never
// blocks).
package wasm
