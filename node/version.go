package node

// Version is the edgereg version, set at build time by the Makefile with
// -ldflags; "dev" otherwise.
var Version = "dev"
