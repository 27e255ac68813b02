// Package version holds the edgereg version, set at build time by the
// Makefile with -ldflags.
package version

// Version is the edgereg version; "dev" for builds outside the Makefile.
var Version = "dev"
