package main

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
)

// prepareRefresh sets up the refresh workload: the routes of the route
// workload, and for each worker the --refresh-topics topics it holds with
// the versions it holds them at. An operation is one get-routes naming all
// of them, every one answered "not modified": what a client that caches
// its routes sends each poll interval (RocketMQ's clients re-read every
// topic they use every 30 s).
func prepareRefresh(ctx context.Context, c *client.Conn, bf *benchFlags) (benchOp, string, error) {
	if _, _, err := prepareRoute(ctx, c, bf); err != nil {
		return nil, "", err
	}
	n := bf.perf.refreshTopics
	if n < 1 || n > bf.topics {
		return nil, "", fmt.Errorf("--refresh-topics %d: give 1 to --topics (%d)", n, bf.topics)
	}
	all := make([]wire.TopicVersion, bf.topics)
	for i := range all {
		all[i].Topic = benchTopicName(i)
	}
	rs, err := c.GetRoutes(ctx, &wire.GetRoutes{Topics: all, Client: wire.ClientAttrs{Zone: bf.zone}})
	if err != nil {
		return nil, "", err
	}
	for i, r := range rs.Results {
		if r.Status != wire.StatusOK {
			return nil, "", fmt.Errorf("topic %s: status %d", r.Topic, r.Status)
		}
		all[i].Version = r.Version
	}
	// Worker w holds n consecutive topics from w*n on, wrapping around.
	reqs := make([]wire.GetRoutes, bf.workers)
	for w := range reqs {
		reqs[w].Client = wire.ClientAttrs{Zone: bf.zone}
		for k := range n {
			reqs[w].Topics = append(reqs[w].Topics, all[(w*n+k)%len(all)])
		}
	}
	// Each worker decodes every answer in full into the Routes it keeps,
	// whose result array DecodeRoutes reuses.
	outs := make([]wire.Routes, bf.workers)
	op := func(ctx context.Context, call caller, w int, _ *rand.Rand) error {
		out := &outs[w]
		if err := call(ctx, wire.TypeGetRoutes, &reqs[w], out); err != nil {
			return err
		}
		if len(out.Results) != n {
			return fmt.Errorf("%d results for %d topics", len(out.Results), n)
		}
		for _, r := range out.Results {
			if r.Status != wire.StatusNotModified {
				return fmt.Errorf("topic %s: status %d, want not modified", r.Topic, r.Status)
			}
		}
		return nil
	}
	return op, fmt.Sprintf("%d unchanged topics per request", n), nil
}

// benchTopicName names topic i of the route and refresh workloads.
func benchTopicName(i int) string { return fmt.Sprintf("rmq_bench_topic_%04d", i) }

// finishWorkload adds what only some workloads report to a closed-loop
// result: refresh counts topic routes, n per request.
func finishWorkload(workload string, res benchResult, bf *benchFlags) benchResult {
	if workload == "refresh" {
		n := float64(bf.perf.refreshTopics)
		res.TopicRoutesPerSec = res.OpsPerSec * n
		res.Note += fmt.Sprintf(": %.0f topic routes/s", res.TopicRoutesPerSec)
		if res.CPUPerOpUs > 0 {
			res.CPUPerTopicUs = res.CPUPerOpUs / n
		}
	}
	return res
}
