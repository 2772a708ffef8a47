package controller

import (
	"fmt"
	"testing"
)

// The run metrics' labels stay within MaxMetricSeries pairs, whatever
// namespaces and prefixes the inbox holds; pairs already labelled keep their
// labels.
func TestSeriesLabelsAreBounded(t *testing.T) {
	l := newSeriesLabels()
	distinct := map[[2]string]bool{}
	for i := range 3 * MaxMetricSeries {
		ns, p := l.of(fmt.Sprintf("ns-%d", i%700), fmt.Sprintf("p%d", i))
		distinct[[2]string{ns, p}] = true
	}
	if len(distinct) != MaxMetricSeries+1 {
		t.Fatalf("%d label pairs, want %d and the %q pair", len(distinct), MaxMetricSeries, otherLabel)
	}
	if ns, p := l.of("ns-0", "p0"); ns != "ns-0" || p != "p0" {
		t.Fatalf("a pair labelled first lost its labels: %s %s", ns, p)
	}
	if ns, p := l.of("new", "pair"); ns != otherLabel || p != otherLabel {
		t.Fatalf("a pair past the bound: %s %s", ns, p)
	}
}
