package controller

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the operator's own Prometheus metrics, registered beside
// controller-runtime's.
type Metrics struct {
	// StatusLag: inbox transition to object status, seconds.
	StatusLag prometheus.Observer
	// Transitions counts audit events by type.
	Transitions *prometheus.CounterVec
	// RunDuration: first start to finish of finished runs, seconds.
	RunDuration *prometheus.HistogramVec
	// Runs by namespace, type prefix (first segment) and status, refreshed
	// by the maintenance loop.
	Runs *prometheus.GaugeVec
	// OldestRunnableAge: age of the oldest runnable pending run per
	// namespace and prefix.
	OldestRunnableAge *prometheus.GaugeVec
	// PoolDesiredReplicas and PoolRunnable, per worker pool.
	PoolDesiredReplicas *prometheus.GaugeVec
	PoolRunnable        *prometheus.GaugeVec
	// PoolMaxReplicas is each worker pool's maxReplicas, PoolReplicas the
	// replicas its target has.
	PoolMaxReplicas *prometheus.GaugeVec
	PoolReplicas    *prometheus.GaugeVec
	// LeaseExpiries counts, per inbox, the leases that expired (their
	// runs retried or failed by a reaper).
	LeaseExpiries *prometheus.CounterVec
	// InboxUp is 1 while an inbox's database answers, 0 while it does not.
	InboxUp *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	lag := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "simpleworkflow_status_lag_seconds",
		Help:    "Time from an inbox transition to the WorkflowRun status showing it.",
		Buckets: []float64{.01, .025, .05, .1, .2, .5, 1, 2, 5, 10, 30},
	})
	m := &Metrics{
		StatusLag: lag,
		Transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "simpleworkflow_transitions_total",
			Help: "Run transitions recorded in the audit trail, by event type.",
		}, []string{"inbox", "event"}),
		RunDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "simpleworkflow_run_duration_seconds",
			Help:    "Time from a run's first start to its end, by namespace, type prefix and final status.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}, []string{"inbox", "namespace", "prefix", "status"}),
		Runs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "simpleworkflow_runs",
			Help: "Runs in the inbox by namespace, type prefix (first segment) and status.",
		}, []string{"inbox", "namespace", "prefix", "status"}),
		OldestRunnableAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "simpleworkflow_oldest_runnable_age_seconds",
			Help: "Age of the oldest runnable pending run, by namespace and type prefix (first segment).",
		}, []string{"inbox", "namespace", "prefix"}),
		InboxUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "simpleworkflow_inbox_up",
			Help: "1 while the inbox's database answers the manager's pings, 0 while it does not.",
		}, []string{"inbox"}),
	}
	m.PoolDesiredReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simpleworkflow_pool_desired_replicas",
		Help: "Replicas a worker pool should have, from its queue depth.",
	}, []string{"namespace", "registry", "pool"})
	m.PoolRunnable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simpleworkflow_pool_runnable_runs",
		Help: "Runnable runs a worker pool's workers could claim, counted up to maxReplicas × runsPerReplica (or activationRuns, if higher).",
	}, []string{"namespace", "registry", "pool"})
	m.PoolMaxReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simpleworkflow_pool_max_replicas",
		Help: "A worker pool's maxReplicas: the replicas it scales to at most.",
	}, []string{"namespace", "registry", "pool"})
	m.PoolReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "simpleworkflow_pool_replicas",
		Help: "Replicas a worker pool's target has (its scale subresource's spec), as the autoscaler last read them.",
	}, []string{"namespace", "registry", "pool"})
	m.LeaseExpiries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "simpleworkflow_lease_expiries_total",
		Help: "Leases that expired (the worker stopped heartbeating): their runs were retried or failed by a reaper.",
	}, []string{"inbox"})
	reg.MustRegister(lag, m.PoolDesiredReplicas, m.PoolRunnable, m.PoolMaxReplicas, m.PoolReplicas, m.Transitions, m.LeaseExpiries,
		m.RunDuration, m.Runs, m.OldestRunnableAge, m.InboxUp)
	return m
}
