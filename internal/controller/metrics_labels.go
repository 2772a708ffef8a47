package controller

// MaxMetricSeries bounds the (namespace, prefix) pairs the run metrics
// label in one refresh (simpleworkflow_runs,
// simpleworkflow_oldest_runnable_age_seconds,
// simpleworkflow_run_duration_seconds): past it, further pairs are counted
// under namespace and prefix "_other", so a tenant that invents type
// prefixes or a cluster of thousands of namespaces cannot grow the
// manager's series without end.
const MaxMetricSeries = 500

// otherLabel is the namespace and prefix of the pairs past MaxMetricSeries.
const otherLabel = "_other"

// seriesLabels hands out (namespace, prefix) label pairs, at most
// MaxMetricSeries distinct ones, in the order first asked.
type seriesLabels struct {
	seen map[[2]string]bool
}

func newSeriesLabels() *seriesLabels { return &seriesLabels{seen: map[[2]string]bool{}} }

// of returns the labels of (namespace, prefix): themselves, or "_other"
// for both once MaxMetricSeries pairs are taken.
func (l *seriesLabels) of(namespace, prefix string) (string, string) {
	k := [2]string{namespace, prefix}
	if l.seen[k] {
		return namespace, prefix
	}
	if len(l.seen) >= MaxMetricSeries {
		return otherLabel, otherLabel
	}
	l.seen[k] = true
	return namespace, prefix
}
