package gateway

import (
	"maps"
	"slices"

	"github.com/edgereg/edgereg/wire"
)

// pollFanout is how many nodes a poll of cluster info, a topic list or a
// member group asks, as the route client asks two for a route: each node
// knows only the brokers that reach it, so one cut off from some answers
// without them, and the union of two hides nothing one of them holds.
const pollFanout = 2

// mergeClusterInfo is the union of the nodes' cluster info: every cluster's
// groups any node lists, and each group's brokers. An id two nodes place at
// different addresses keeps the first answer's (the readiest node's).
func mergeClusterInfo(answers []wire.ClusterInfo) wire.ClusterInfo {
	if len(answers) == 1 {
		return answers[0]
	}
	out := wire.ClusterInfo{Clusters: map[string][]string{}, Groups: map[string]wire.BrokerData{}}
	for _, ci := range answers {
		for cluster, groups := range ci.Clusters {
			out.Clusters[cluster] = append(out.Clusters[cluster], groups...)
		}
		for name, bd := range ci.Groups {
			out.Groups[name] = mergeBrokerData(out.Groups[name], bd)
		}
	}
	for cluster, groups := range out.Clusters {
		slices.Sort(groups)
		out.Clusters[cluster] = slices.Compact(groups)
	}
	return out
}

// mergeBrokerData adds b's brokers to a's (a's win a conflict); a may be
// the zero value.
func mergeBrokerData(a, b wire.BrokerData) wire.BrokerData {
	if a.Name == "" {
		a.Cluster, a.Name, a.Zone = b.Cluster, b.Name, b.Zone
	}
	addrs := make(map[int64]string, len(a.Addrs)+len(b.Addrs))
	maps.Copy(addrs, b.Addrs)
	maps.Copy(addrs, a.Addrs)
	a.Addrs = addrs
	return a
}

// mergeTopics is the sorted union of the nodes' topic lists.
func mergeTopics(answers [][]string) []string {
	if len(answers) == 1 {
		return answers[0]
	}
	var out []string
	for _, l := range answers {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
