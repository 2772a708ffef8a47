package main

import (
	"runtime"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

func TestBuildInfoIsServedWithTheStampedVersion(t *testing.T) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "simpleworkflow_build_info" {
			continue
		}
		if len(f.GetMetric()) != 1 {
			t.Fatalf("simpleworkflow_build_info has %d series, want 1", len(f.GetMetric()))
		}
		m := f.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != version || labels["revision"] != revision || labels["goversion"] != runtime.Version() {
			t.Errorf("labels %v, want version %q, revision %q, goversion %q", labels, version, revision, runtime.Version())
		}
		if m.GetGauge().GetValue() != 1 {
			t.Errorf("value %v, want 1", m.GetGauge().GetValue())
		}
		return
	}
	t.Fatal("simpleworkflow_build_info is not registered in controller-runtime's metrics registry")
}
