package main

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// version and revision name the build. Release builds (make image, the
// Dockerfile's binaries) stamp them with
// -ldflags "-X main.version=v0.1.0 -X main.revision=<git commit>".
var (
	version  = "dev"
	revision = "unknown"
)

// buildInfo is the gauge simpleworkflow_build_info, always 1, whose labels
// say which build of the manager serves the metrics endpoint.
func buildInfo() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "simpleworkflow_build_info",
		Help: "Always 1; the labels name the manager's build (version, git revision, Go version).",
		ConstLabels: prometheus.Labels{
			"version": version, "revision": revision, "goversion": runtime.Version(),
		},
	}, func() float64 { return 1 })
}

func init() {
	// controller-runtime serves metrics.Registry on --metrics-bind-address.
	metrics.Registry.MustRegister(buildInfo())
}
