package main

import (
	"fmt"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// looks returns how many reconciles of the named controller ran, by
// result, and their total time in seconds, from the manager's metrics.
func looks(controller string) (map[string]float64, float64, error) {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return nil, 0, fmt.Errorf("gather the manager's metrics: %w", err)
	}
	byResult := map[string]float64{}
	var seconds float64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["controller"] != controller {
				continue
			}
			switch f.GetName() {
			case "controller_runtime_reconcile_total":
				byResult[labels["result"]] += m.GetCounter().GetValue()
			case "controller_runtime_reconcile_time_seconds":
				seconds += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return byResult, seconds, nil
}

// fmtResults prints each result's count per run, in a stable order.
func fmtResults(byResult map[string]float64, runs float64) string {
	out := ""
	for _, k := range []string{"success", "requeue_after", "requeue", "error"} {
		if v := byResult[k]; v > 0 {
			if out != "" {
				out += ", "
			}
			out += fmt.Sprintf("%s %.2f", k, v/runs)
		}
	}
	return out
}
