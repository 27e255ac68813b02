package node

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgereg/edgereg/wire"
)

// Version is the edgereg version and Commit the source revision it was
// built from, set at build time by the Makefile (and the image build) with
// -ldflags; "dev" and "" otherwise, in which case Commit falls back to the
// revision the Go toolchain stamped, if any.
var (
	Version = "dev"
	Commit  = ""
)

// BuildInfo describes the running binary: what `edgereg version` prints and
// edgereg_build_info exports.
type BuildInfo struct {
	Version   string   `json:"version"`
	Commit    string   `json:"commit"`
	GoVersion string   `json:"go_version"`
	Platform  string   `json:"platform"`
	ALPN      []string `json:"alpn"`
}

// Build returns the running binary's BuildInfo.
func Build() BuildInfo {
	b := BuildInfo{Version: Version, Commit: Commit, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, ALPN: []string{wire.ALPN}}
	if b.Commit == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					b.Commit = s.Value
				}
			}
		}
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// newBuildInfoGauge is edgereg_build_info: constant 1, with the build in
// its labels, so dashboards can show and join on the version.
func newBuildInfoGauge() prometheus.Collector {
	b := Build()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "edgereg_build_info",
		Help: "Always 1; the labels describe the running binary.",
		ConstLabels: prometheus.Labels{"version": b.Version, "commit": b.Commit,
			"goversion": b.GoVersion, "alpn": wire.ALPN},
	})
	g.Set(1)
	return g
}
