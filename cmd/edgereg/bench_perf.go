package main

import (
	"context"
	"io"

	"github.com/spf13/pflag"
)

// perfFlags are the parameters of the refresh and watch workloads.
type perfFlags struct {
	refreshTopics int     // topics each refresh worker holds and polls
	watchers      int     // watch streams
	watchTopics   int     // topics every watcher watches
	changeRate    float64 // route changes per second during watch
	watchersPer   int     // watch streams per connection
}

func addPerfFlags(f *pflag.FlagSet, pf *perfFlags) {
	f.IntVar(&pf.refreshTopics, "refresh-topics", 100, "refresh workload: topics each worker holds and polls in one request")
	f.IntVar(&pf.watchers, "watchers", 1000, "watch workload: watch streams")
	f.IntVar(&pf.watchTopics, "watch-topics", 1, "watch workload: topics every watcher watches")
	f.Float64Var(&pf.changeRate, "change-rate", 20, "watch workload: route changes per second")
	f.IntVar(&pf.watchersPer, "watchers-per-conn", 50, "watch workload: watch streams per connection (the node allows --max-streams-per-conn)")
}

// perfWorkloads are the workloads with a runner of their own rather than
// the closed loop of measure.
var perfWorkloads = map[string]func(ctx context.Context, progress io.Writer, tgt *benchTarget, bf *benchFlags) (benchResult, error){
	"watch": runWatchBench,
}
