package node

import "github.com/edgereg/edgereg/wire"

// encodeBody encodes a response body. Get-routes responses, the node's
// hottest message, take the hand-written encoder (wire.AppendRoutes, the
// same bytes without reflection); every other body takes wire.Marshal.
func encodeBody(body any) ([]byte, error) {
	if r, ok := body.(*wire.Routes); ok {
		return wire.AppendRoutes(make([]byte, 0, routesSizeHint(r)), r), nil
	}
	return wire.MarshalBody(body) // register and heartbeat answers without reflection
}

// routesSizeHint is a close upper bound of r's encoding, so the buffer is
// allocated once.
func routesSizeHint(r *wire.Routes) int {
	n := 2 + 9
	for i := range r.Results {
		n += 1 + 2 + 9 + len(r.Results[i].Topic) + 2 + 2 + 9 + 1 + len(r.Results[i].Route)
	}
	return n
}

// newRoutes returns a response for n topics. The one-topic response, the
// usual route read, is one allocation instead of two.
func newRoutes(n int) *wire.Routes {
	if n == 1 {
		one := &struct {
			routes  wire.Routes
			results [1]wire.RouteResult
		}{}
		one.routes.Results = one.results[:]
		return &one.routes
	}
	return &wire.Routes{Results: make([]wire.RouteResult, n)}
}
