// Package wire is what crosses the network between edgereg nodes, brokers,
// clients and operators: the message types, their CBOR encoding with its
// decoding limits, error codes, framing, and TLS/QUIC configuration.
package wire
