//go:build !unix

package datadir

import "errors"

// LockFile is the file in a data directory that Lock holds.
const LockFile = "lock"

// ErrInUse is Lock's error when another holder has the directory.
var ErrInUse = errors.New("in use by another node")

// Lock does nothing where flock(2) is missing: the directory is not
// guarded against a second node.
func Lock(dir string) (release func() error, err error) { return func() error { return nil }, nil }
