package buildinfo

import "github.com/prometheus/client_golang/prometheus"

// Collector is the usher_build_info gauge: 1, labelled with in's version,
// revision and Go version, so that a dashboard can tell which build each
// replica runs.
func (in Info) Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "usher_build_info",
		Help: "The build this process runs: always 1, labelled with its version, revision and Go version.",
		ConstLabels: prometheus.Labels{
			"version": in.Version, "revision": in.Revision, "goversion": in.GoVersion,
		},
	})
	g.Set(1)
	return g
}
