// Package simtest holds deterministic-time simulations of whole edgereg
// deployments (nodes, brokers and route clients) on a simulated lossy
// network: quic-go's testutils/simnet endpoints inside a testing/synctest
// bubble, so half an hour of virtual time runs in seconds. The package has
// no code of its own; everything is in its tests.
package simtest
