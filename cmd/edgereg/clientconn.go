package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// clientTLS builds the CLI's TLS config: the given credentials, or the local
// operator credential that a node on this machine created in --data.
func (g *globals) clientTLS() (*tls.Config, error) {
	if g.cert != "" || g.key != "" {
		if g.cert == "" || g.key == "" || g.ca == "" {
			return nil, usageError{errors.New("--cert, --key and --ca go together")}
		}
		cert, pool, err := pki.LoadCredentials(g.cert, g.key, g.ca)
		if err != nil {
			return nil, err
		}
		return pki.ClientConfig(&cert, pool, ""), nil
	}
	cert, pool, err := pki.LocalOperator(g.data)
	if err != nil {
		return nil, err
	}
	return pki.ClientConfig(&cert, pool, ""), nil
}

// context returns the command's context bounded by --timeout.
func (g *globals) context(parent context.Context) (context.Context, context.CancelFunc, error) {
	d, err := time.ParseDuration(g.timeout)
	if err != nil || d <= 0 {
		return nil, nil, usageError{fmt.Errorf("--timeout %q: give a positive duration such as 10s", g.timeout)}
	}
	ctx, cancel := context.WithTimeout(parent, d)
	return ctx, cancel, nil
}

func (g *globals) nodeList() ([]string, error) {
	var out []string
	for _, n := range g.nodes {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		// A malformed address is a usage error, named before any dial
		// (the route client would wait out --timeout on it).
		_, port, err := net.SplitHostPort(n)
		if p, perr := strconv.Atoi(port); err != nil || perr != nil || p <= 0 || p > 65535 {
			return nil, usageError{fmt.Errorf("--nodes %q: want HOST:PORT", n)}
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, usageError{errors.New("--nodes names no node")}
	}
	return out, nil
}

// withAnyNode runs fn against the first node of --nodes that answers.
func (g *globals) withAnyNode(ctx context.Context, fn func(*client.Conn) error) error {
	nodes, err := g.nodeList()
	if err != nil {
		return err
	}
	return g.withNodes(ctx, nodes, fn)
}

// withNodes runs fn against the first of nodes that answers, trying each
// in turn: reads are the same on every node.
func (g *globals) withNodes(ctx context.Context, nodes []string, fn func(*client.Conn) error) error {
	conf, err := g.clientTLS()
	if err != nil {
		return err
	}
	var errs []error
	for _, addr := range nodes {
		c, err := client.Dial(ctx, addr, client.Config{TLS: conf})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		err = fn(c)
		c.Close()
		if err == nil || !tryNext(err) {
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return fmt.Errorf("no node answered: %w", errors.Join(errs...))
}

// nodeResult is one node's answer to a change sent to every node.
type nodeResult struct {
	Node  string `json:"node"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	Value any    `json:"value,omitempty"`
	err   error
}

// partialError is a change that reached some nodes but not all (exit code
// 6): the nodes now disagree until it is repeated.
type partialError struct {
	failed, total int
	err           error
}

func (e *partialError) Error() string {
	return fmt.Sprintf("%d of %d nodes failed, the others took the change; repeat it once they are back: %v", e.failed, e.total, e.err)
}

func (e *partialError) Unwrap() error { return e.err }

// withEveryNode runs fn against every node, since nodes share nothing: an
// administrative change must reach each of them. It fails if any node did:
// with a partialError if some succeeded.
func (g *globals) withEveryNode(ctx context.Context, fn func(*client.Conn) (any, error)) ([]nodeResult, error) {
	conf, err := g.clientTLS()
	if err != nil {
		return nil, err
	}
	nodes, err := g.nodeList()
	if err != nil {
		return nil, err
	}
	results := make([]nodeResult, len(nodes))
	done := make(chan struct{}, len(nodes))
	for i, addr := range nodes {
		go func() {
			defer func() { done <- struct{}{} }()
			results[i] = nodeResult{Node: addr}
			c, err := client.Dial(ctx, addr, client.Config{TLS: conf})
			if err != nil {
				results[i].Error, results[i].err = err.Error(), err
				return
			}
			defer c.Close()
			v, err := fn(c)
			if err != nil { // the error alone: a zero value would read as an answer
				results[i].Error, results[i].err = err.Error(), fmt.Errorf("%s: %w", addr, err)
				return
			}
			results[i].OK, results[i].Value = true, v
		}()
	}
	for range nodes {
		<-done
	}
	var errs []error
	for _, r := range results {
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	switch {
	case len(errs) == 0:
		return results, nil
	case len(errs) < len(nodes):
		return results, &partialError{failed: len(errs), total: len(nodes), err: errors.Join(errs...)}
	}
	return results, fmt.Errorf("%d of %d nodes failed: %w", len(errs), len(nodes), errors.Join(errs...))
}

// tryNext tells whether another node may answer where this one did not: a
// node that could not be reached, is warming up, busy or stopping.
func tryNext(err error) bool {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code == wire.CodeWarmingUp || we.Code == wire.CodeUnavailable || we.Code == wire.CodeOverloaded
	}
	return true
}

// nodesFailed is the error of a read asked of every node (status, ping,
// --all-nodes) when failed of them did not answer; errs holds each node's
// error, nil for those that answered. When none answered it wraps their
// errors, so the exit code says why (4 unreachable, 5 refused); when some
// did, their answers are printed and it is a plain failure (exit 1).
func nodesFailed(what string, failed int, errs []error) error {
	switch {
	case failed == 0:
		return nil
	case failed < len(errs):
		return fmt.Errorf("%d of %d nodes %s", failed, len(errs), what)
	}
	return fmt.Errorf("%d of %d nodes %s: %w", failed, len(errs), what, errors.Join(errs...))
}
