// Command zone-affinity is a route filter policy that keeps clients in
// their zone, following Apache RocketMQ's ZoneRouteRPCHook exactly:
//
//   - a client that sent no zone (empty or blank) sees the whole route;
//   - otherwise it sees the broker groups whose zone equals its zone
//     (compared case-insensitively, like Java's equalsIgnoreCase), plus
//     every group that has no master (broker id 0) in the route, so that
//     it can still consume from the slaves of a group whose master is down
//     ("master down, consume from slave; break the nearby route rule");
//   - queue data is kept only for groups that were kept;
//   - when nothing matches, the route is returned empty, as RocketMQ does:
//     a client pinned to a zone with no broker must not silently cross
//     zones.
//
// RocketMQ also requires the request's zoneMode flag to be true. edgereg
// clients say they want zone affinity by sending a zone, so the flag is
// on by default here; a client label zoneMode set to anything other than
// "true" (case-insensitive, like Boolean.parseBoolean) turns it off.
//
// Note that the registry shows a read-only group without a master with its
// lowest-id slave as acting master (RocketMQ's supportActingMaster) before
// the filter runs; RocketMQ's hook sees the same thing, so such a group is
// filtered by zone like any other.
package main

import (
	"strings"

	"github.com/edgereg/edgereg/policies/sdk"
)

func init() { sdk.RouteFilter(filterByZone) }

func main() {}

func filterByZone(in sdk.RouteInput) (sdk.Route, error) {
	zone := in.Client.Zone
	if strings.TrimSpace(zone) == "" || !zoneMode(in.Client.Labels) {
		return in.Route, nil
	}
	out := sdk.Route{Queues: []sdk.QueueData{}, Brokers: []sdk.BrokerData{}}
	removed := map[string]bool{}
	for _, b := range in.Route.Brokers {
		_, hasMaster := b.Addrs[sdk.MasterID]
		if !hasMaster || strings.EqualFold(b.Zone, zone) {
			out.Brokers = append(out.Brokers, b)
		} else {
			removed[b.Name] = true
		}
	}
	for _, q := range in.Route.Queues {
		if !removed[q.BrokerName] {
			out.Queues = append(out.Queues, q)
		}
	}
	return out, nil
}

// zoneMode reads the optional zoneMode label the way Java's
// Boolean.parseBoolean reads RocketMQ's flag; absent means on.
func zoneMode(labels map[string]string) bool {
	v, ok := labels["zoneMode"]
	return !ok || strings.EqualFold(v, "true")
}
