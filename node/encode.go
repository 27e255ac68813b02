package node

import (
	"errors"

	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
)

// routeSet is a get-routes answer being made: the routes, and for each
// result the registry's route it carries unfiltered (nil for the others),
// which describes its groups' freshness.
type routeSet struct {
	out     *wire.Routes
	entries []*registry.EncodedRoute
}

// maxGroupsInline is how many groups' freshness a one-topic answer holds
// without another allocation: a topic usually lives on a few groups.
const maxGroupsInline = 4

// maxKeptTopics bounds the answer a stream keeps for its next read: a
// poll of more topics allocates its own.
const maxKeptTopics = 256

// getRoutesQuery returns the GetRoutes to decode a get-routes request
// into: w's, on a stream, so that a request costs no allocation for it;
// a new one without a writer (tests call handle with none).
func (w *streamWriter) getRoutesQuery() *wire.GetRoutes {
	if w == nil {
		return new(wire.GetRoutes)
	}
	return &w.query // emptied after its last request, its array kept (dispatch)
}

// takeRouteSet returns an answer for n topics: the one w kept from its
// stream's last read when it has room (a client polls the same topics on
// the same stream again and again), else a new one. w may be nil.
func (w *streamWriter) takeRouteSet(n int) *routeSet {
	if w == nil || w.spare == nil || cap(w.spare.out.Results) < n || cap(w.spare.entries) < n {
		return newRouteSet(n)
	}
	rs := w.spare
	w.spare = nil
	rs.out.Results, rs.entries = rs.out.Results[:n], rs.entries[:n]
	return rs
}

// keepRouteSet keeps rs, whose answer has been written, for the stream's
// next read, emptied: it must not keep routes, names or freshness alive
// while the stream waits. Only the request loop calls it.
func (w *streamWriter) keepRouteSet(rs *routeSet) {
	if rs == nil || cap(rs.out.Results) > maxKeptTopics {
		return
	}
	clear(rs.out.Results[:cap(rs.out.Results)])
	clear(rs.entries[:cap(rs.entries)])
	clear(rs.out.Groups[:cap(rs.out.Groups)])
	*rs.out = wire.Routes{Results: rs.out.Results[:0], Groups: rs.out.Groups[:0]}
	w.spare = rs
}

// newRouteSet returns an answer for n topics. The one-topic answer, the
// usual route read, is one allocation: results, entries and room for the
// freshness of its groups are in the same block.
func newRouteSet(n int) *routeSet {
	if n == 1 {
		one := &struct {
			rs      routeSet
			routes  wire.Routes
			results [1]wire.RouteResult
			entries [1]*registry.EncodedRoute
			groups  [maxGroupsInline]wire.GroupFreshness
		}{}
		one.routes.Results = one.results[:]
		one.routes.Groups = one.groups[:0]
		one.rs = routeSet{out: &one.routes, entries: one.entries[:]}
		return &one.rs
	}
	return &routeSet{
		out:     &wire.Routes{Results: make([]wire.RouteResult, n)},
		entries: make([]*registry.EncodedRoute, n),
	}
}

// appendAnswer appends a's frame to dst, length prefix included, each
// kind encoded in one pass straight into dst and without the
// well-formedness check wire.AppendFrame makes of a body it is given: the
// node encodes every body it sends. A get-routes answer takes
// wire.AppendRoutesFrame (every route is well-formed: the registry
// encodes them; a route policy's output is re-encoded by the host); any
// other message wire.AppendResponse (the hand-written encoders of the
// register and heartbeat answers, Marshal for the rest); an error answer
// wire.AppendFrame. A message that cannot be encoded is answered with an
// internal error, as a failed request is; a frame over wire.MaxFrameLen
// is the error returned.
func appendAnswer(dst []byte, a *answer) ([]byte, error) {
	switch {
	case a.routes != nil:
		return wire.AppendRoutesFrame(dst, a.Type, a.ID, a.routes)
	case a.Error != nil:
		return wire.AppendFrame(dst, &a.Frame)
	}
	out, err := wire.AppendResponse(dst, a.Type, a.ID, a.body)
	if err != nil && !errors.Is(err, wire.ErrFrameTooLarge) {
		return wire.AppendFrame(dst, &wire.Frame{Type: a.Type, ID: a.ID,
			Error: wire.Errorf(wire.CodeInternal, "encode response: %v", err)})
	}
	return out, err
}
