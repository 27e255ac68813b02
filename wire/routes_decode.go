package wire

import (
	"bytes"
	"math"
	"unicode/utf8"
	"unsafe"
)

// This file holds the hand-written decoder of a get-routes answer (Routes),
// the message every route read of a client decodes. It reads the shape a
// node sends (keys in ascending order, definite lengths, no tags, every
// field of the types it knows, routes as CBOR maps of integer keys) and
// declines everything else, which then goes to the general decoder: the
// fast path never returns an error of its own, so errors are the general
// decoder's, and a value it returns is the one the general decoder gives
// (TestDecodeRoutes and FuzzDecodeRoutes compare them). It refuses
// duplicate keys itself, at every depth, so a body it took needs no
// separate duplicate-key walk.

// maxFastRouteDepth is how deep, counting the Routes map as level 1, the
// fast decoder follows a route's items before it declines: well inside
// MaxNestingLevel, so that whatever it takes the general decoder takes
// too. A route nests 7 levels deep (Routes, results, result, route,
// brokers, broker, addresses).
const maxFastRouteDepth = MaxNestingLevel - 4

// routesDecoder holds what decodeRoutesFast shares across an answer: one
// copy of the body, made only once a string or route of the answer is new,
// which every new text field and every route is taken from. One
// allocation for all of them: a route read's answer, whose topic differs
// from the answer decoded before it, used to cost two (a string copy for
// the texts, a byte copy for the routes). The texts are strings over the
// copy's bytes (unsafe.String), the routes slices of it capped at their
// end; the two never overlap, and the copy is never written once it is
// made, so a caller that writes into a route (or appends to one) can
// change no string, and no string ever changes.
type routesDecoder struct {
	body   []byte
	own    []byte       // the copy of body; nil until needed
	checks *RouteChecks // routes checked before; nil for none
}

// RouteChecks remembers route items the routes decoder has checked (their
// bytes, by the version the answer gives them), so that decoding the same
// route again, in every answer for a topic whose route has not changed and
// for topics that share a route, skips walking it: a route at the start
// of the bytes left is the one remembered exactly when those bytes begin
// with it, as a CBOR item's extent follows from its own bytes. The
// version only picks the entry to compare; a wrong one costs a walk,
// never a wrong answer. It keeps its own copies, never handed out, of at
// most maxCheckedRoutes routes of at most maxCheckedRouteLen bytes (64 KiB), and
// forgets them all when full. The zero value is ready; it is not safe
// for concurrent use (a client keeps one per stream or per call buffer).
type RouteChecks struct {
	seen map[uint64][]byte
}

const (
	maxCheckedRoutes   = 64
	maxCheckedRouteLen = 1024
)

// known returns the length of the route remembered for version when b
// starts with it, else 0.
func (c *RouteChecks) known(version uint64, b []byte) int {
	if c == nil {
		return 0
	}
	if r, ok := c.seen[version]; ok && bytes.HasPrefix(b, r) {
		return len(r)
	}
	return 0
}

// add remembers route, which the decoder has just checked, for version.
func (c *RouteChecks) add(version uint64, route []byte) {
	if c == nil || len(route) > maxCheckedRouteLen {
		return
	}
	if c.seen == nil || len(c.seen) >= maxCheckedRoutes {
		c.seen = make(map[uint64][]byte)
	}
	c.seen[version] = bytes.Clone(route)
}

// copied returns the copy's bytes at the offset of rest[:size] in body.
func (d *routesDecoder) copied(rest []byte, size int) []byte {
	if d.own == nil {
		d.own = bytes.Clone(d.body)
	}
	at := len(d.body) - len(rest)
	return d.own[at : at+size : at+size]
}

// decodeRoutesFast decodes body into r and reports whether it could. It
// reuses r's Results and Groups arrays when they are large enough, and
// the strings r holds where the answer has the same ones (strings never
// change, so sharing them is safe); route bytes are always new, so a
// RouteResult copied out of an earlier answer stays valid. When it reports false, r holds
// nothing useful and the caller decodes again with the general decoder.
func decodeRoutesFast(body []byte, r *Routes) bool {
	return decodeRoutesChecked(body, r, nil)
}

// decodeRoutesChecked is decodeRoutesFast skipping the walk of the routes
// checks remembers, and remembering those it walks.
func decodeRoutesChecked(body []byte, r *Routes, checks *RouteChecks) bool {
	major, pairs, b, err := head(body)
	if err != nil || major != 5 || pairs > 3 {
		return false
	}
	d := routesDecoder{body: body, checks: checks}
	var out Routes
	last := uint64(0)
	for range pairs {
		var key uint64
		if major, key, b, err = head(b); err != nil || major != 0 || key <= last || key > 3 {
			return false
		}
		last = key
		var ok bool
		switch key {
		case 1:
			out.Results, b, ok = d.results(b, r.Results)
		case 2:
			out.Groups, b, ok = d.groups(b, r.Groups)
		case 3:
			b, ok = d.nodeState(b, &out.Node, r.Node.NodeID)
		}
		if !ok {
			return false
		}
	}
	if len(b) != 0 {
		return false // trailing bytes: the general decoder's error
	}
	*r = out
	return true
}

// str returns the text string item at the start of b and the rest. The
// string is old when it has the same bytes (the same field of the answer
// decoded last into the same Routes: a poll names the same topics, groups
// and node every time), else it is taken from d.src.
func (d *routesDecoder) str(b []byte, old string) (string, []byte, bool) {
	major, size, rest, err := head(b)
	if err != nil || major != 3 || size > uint64(len(rest)) || !utf8.Valid(rest[:size]) {
		return "", nil, false
	}
	if string(rest[:size]) == old {
		return old, rest[size:], true
	}
	if size == 0 {
		return "", rest, true
	}
	return unsafe.String(&d.copied(rest, int(size))[0], int(size)), rest[size:], true
}

// results decodes the array of route results, into reuse's array when it
// has room.
func (d *routesDecoder) results(b []byte, reuse []RouteResult) ([]RouteResult, []byte, bool) {
	major, n, b, err := head(b)
	// Each result takes at least 3 bytes: a bound before allocating.
	if err != nil || major != 4 || n > MaxArrayElements || n > uint64(len(b))/3 {
		return nil, nil, false
	}
	results := reuse[:0]
	if uint64(cap(reuse)) < n || reuse == nil {
		results = make([]RouteResult, 0, n)
	}
	results = results[:n]
	var ok bool
	for i := range results {
		old := results[i].Topic
		results[i] = RouteResult{}
		if b, ok = d.result(b, &results[i], old); !ok {
			return nil, nil, false
		}
	}
	return results, b, true
}

// result decodes {1: topic, 2: status, 3: version, 4: route}, any of them
// absent.
func (d *routesDecoder) result(b []byte, res *RouteResult, oldTopic string) ([]byte, bool) {
	major, pairs, b, err := head(b)
	if err != nil || major != 5 || pairs > 4 {
		return nil, false
	}
	last := uint64(0)
	for range pairs {
		var key, v uint64
		if major, key, b, err = head(b); err != nil || major != 0 || key <= last || key > 4 {
			return nil, false
		}
		last = key
		var ok bool
		switch key {
		case 1:
			if res.Topic, b, ok = d.str(b, oldTopic); !ok {
				return nil, false
			}
		case 2:
			if major, v, b, err = head(b); err != nil || major != 0 || v > math.MaxUint8 {
				return nil, false
			}
			res.Status = RouteStatus(v)
		case 3:
			if major, res.Version, b, err = head(b); err != nil || major != 0 {
				return nil, false
			}
		case 4:
			if res.Route, b, ok = d.route(b, res.Version); !ok {
				return nil, false
			}
		}
	}
	return b, true
}

// route checks the route item at the start of b and returns a copy of its
// bytes, from the answer's one copy. version is the one the result gave
// before the route, zero if none: it picks the remembered route to
// compare (RouteChecks).
func (d *routesDecoder) route(b []byte, version uint64) ([]byte, []byte, bool) {
	if len(b) == 0 || b[0]>>5 != 5 {
		return nil, nil, false // a route is a map; anything else, the general decoder judges
	}
	if n := d.checks.known(version, b); n > 0 {
		return d.copied(b, n), b[n:], true
	}
	rest, ok := fastItem(b, 4)
	if !ok {
		return nil, nil, false
	}
	n := len(b) - len(rest)
	d.checks.add(version, b[:n])
	return d.copied(b, n), rest, true
}

// fastItem skips one item that sits at nesting level depth, checking it as
// strictly as the general decoder and the duplicate-key walk would, and
// reports false for anything it does not take: indefinite lengths, tags,
// floats and simple values other than false, true and null, invalid
// UTF-8, maps with keys other than small unsigned integers, duplicate
// keys, and anything nested deeper than maxFastRouteDepth.
func fastItem(b []byte, depth int) ([]byte, bool) {
	major, arg, rest, err := head(b)
	if err != nil {
		return nil, false
	}
	switch major {
	case 0, 1:
		return rest, true
	case 2, 3:
		if arg > uint64(len(rest)) || major == 3 && !utf8.Valid(rest[:arg]) {
			return nil, false
		}
		return rest[arg:], true
	case 7:
		return rest, b[0] >= 0xf4 && b[0] <= 0xf6
	}
	if depth >= maxFastRouteDepth {
		return nil, false
	}
	var ok bool
	switch major {
	case 4:
		if arg > MaxArrayElements || arg > uint64(len(rest)) {
			return nil, false
		}
		for range arg {
			if rest, ok = fastItem(rest, depth+1); !ok {
				return nil, false
			}
		}
		return rest, true
	case 5:
		// Keys are unsigned integers below 64, told apart by value (as
		// the general decoder and the duplicate-key walk compare them,
		// whatever their encoding's width); so a map has at most 64 pairs.
		var seen uint64
		if arg > 64 {
			return nil, false
		}
		for range arg {
			var key uint64
			if major, key, rest, err = head(rest); err != nil || major != 0 || key >= 64 || seen&(1<<key) != 0 {
				return nil, false
			}
			seen |= 1 << key
			if rest, ok = fastItem(rest, depth+1); !ok {
				return nil, false
			}
		}
		return rest, true
	}
	return nil, false // a tag
}

// groups decodes the array of group freshness, into reuse's array when
// it has room.
func (d *routesDecoder) groups(b []byte, reuse []GroupFreshness) ([]GroupFreshness, []byte, bool) {
	major, n, b, err := head(b)
	// Each entry takes at least 1 byte (an empty map).
	if err != nil || major != 4 || n > MaxArrayElements || n > uint64(len(b)) {
		return nil, nil, false
	}
	groups := reuse[:0]
	if uint64(cap(reuse)) < n || reuse == nil {
		groups = make([]GroupFreshness, 0, n)
	}
	groups = groups[:n]
	for i := range groups {
		g := &groups[i]
		old := g.BrokerName
		*g = GroupFreshness{}
		var pairs uint64
		if major, pairs, b, err = head(b); err != nil || major != 5 || pairs > 3 {
			return nil, nil, false
		}
		last := uint64(0)
		for range pairs {
			var key uint64
			if major, key, b, err = head(b); err != nil || major != 0 || key <= last || key > 3 {
				return nil, nil, false
			}
			last = key
			var ok bool
			switch key {
			case 1:
				g.BrokerName, b, ok = d.str(b, old)
			case 2:
				g.AgeMs, b, ok = readInt64(b)
			case 3:
				g.DeadlineInMs, b, ok = readInt64(b)
			}
			if !ok {
				return nil, nil, false
			}
		}
	}
	return groups, b, true
}

// nodeState decodes {1: node id, 2: started, 3: warming up}, any absent.
func (d *routesDecoder) nodeState(b []byte, ns *NodeState, oldID string) ([]byte, bool) {
	major, pairs, b, err := head(b)
	if err != nil || major != 5 || pairs > 3 {
		return nil, false
	}
	last := uint64(0)
	for range pairs {
		var key uint64
		if major, key, b, err = head(b); err != nil || major != 0 || key <= last || key > 3 {
			return nil, false
		}
		last = key
		ok := true
		switch key {
		case 1:
			ns.NodeID, b, ok = d.str(b, oldID)
		case 2:
			ns.StartedMs, b, ok = readInt64(b)
		case 3:
			if len(b) == 0 || b[0] != 0xf4 && b[0] != 0xf5 {
				return nil, false
			}
			ns.WarmingUp, b = b[0] == 0xf5, b[1:]
		}
		if !ok {
			return nil, false
		}
	}
	return b, true
}
