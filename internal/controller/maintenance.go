package controller

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Maintenance is the leader's housekeeping: it reclaims expired leases,
// deletes finished runs past their retention and keeps the audit trail's
// partitions, dropping those retention emptied (retainLoop), fires the cron schedules that are due (scheduleLoop) and
// refreshes the inbox metrics. It is a manager Runnable (leader only).
type Maintenance struct {
	Engine *engine.Engine
	// Inbox names the inbox in metrics; DefaultInboxName when empty.
	Inbox string
	// Down, optional, reports that the inbox's database does not answer:
	// the loops skip their work meanwhile instead of logging each failure
	// (the inbox's own health is reported once, by whoever pings it).
	Down func() bool
	Log  logr.Logger
	// Metrics to refresh; optional.
	Metrics *Metrics
	// ReapInterval defaults to 5s.
	ReapInterval time.Duration
	// Retention is how long finished runs are kept; zero keeps them forever.
	Retention time.Duration
	// RetentionInterval defaults to 1m.
	RetentionInterval time.Duration
	// MetricsInterval defaults to 10s.
	MetricsInterval time.Duration
	// ScheduleInterval is how often due schedules are fired; defaults to 1s.
	ScheduleInterval time.Duration
	// Schedules is told of every tick fired (the WorkflowSchedule
	// controller makes the WorkflowRuns); optional.
	Schedules FiringHandler
}

// Start runs the loops until ctx ends.
func (m *Maintenance) Start(ctx context.Context) error {
	reap := time.NewTicker(orDefault(m.ReapInterval, 5*time.Second))
	defer reap.Stop()
	stats := time.NewTicker(orDefault(m.MetricsInterval, 10*time.Second))
	defer stats.Stop()
	var lastEventID int64
	finishedSince, lastRead := time.Now(), time.Now()
	if m.Metrics != nil {
		// Count transitions from now on, not the whole history.
		lastEventID = m.latestEventID(ctx)
	}
	// Retention in a loop of its own: a long pass of deletions does not hold
	// up lease reaping and deadlines. Ended and awaited on every return.
	rctx, stopRetention := context.WithCancel(ctx)
	retained := make(chan struct{})
	go func() {
		defer close(retained)
		m.retainLoop(rctx)
	}()
	defer func() { stopRetention(); <-retained }()
	// Schedules in a loop of their own too: a tick fires within
	// ScheduleInterval of being due, whatever the other loops are doing.
	fired := make(chan struct{})
	go func() {
		defer close(fired)
		m.scheduleLoop(rctx)
	}()
	defer func() { stopRetention(); <-fired }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reap.C:
			if m.down() {
				continue
			}
			for {
				res, err := m.Engine.ReapExpiredLeases(ctx, 1000)
				if err != nil {
					if ctx.Err() == nil {
						m.Log.Error(err, "Reaping expired leases failed")
					}
					break
				}
				for _, r := range res {
					m.Log.Info("Lease expired; run reclaimed", "runID", r.ID, "status", r.Status)
				}
				if len(res) < 1000 {
					break
				}
			}
			// Runs past their deadline fail wherever they are (pending,
			// parked or leased); workers do this too.
			expired, err := m.Engine.ExpireDeadlines(ctx, 1000)
			if err != nil && ctx.Err() == nil {
				m.Log.Error(err, "Expiring deadlines failed")
			}
			for _, id := range expired {
				m.Log.Info("Run failed: deadline exceeded", "runID", id)
			}
		case <-stats.C:
			if m.Metrics == nil || m.down() {
				continue
			}
			// The runs finished since the last read, should the database's
			// clock have moved back (a second to spare).
			lookback := time.Since(lastRead) + time.Second
			lastRead = time.Now()
			lastEventID, finishedSince = m.refreshMetrics(ctx, lastEventID, finishedSince, lookback)
		}
	}
}

// scheduleBatch is how many due schedules one call fires (the default of
// workflow.fire_due_schedules).
const scheduleBatch = 100

// scheduleLoop fires the due schedules every ScheduleInterval until ctx
// ends, and hands what it fired to Schedules. Each tick of a schedule
// records one run however many managers fire at once (the database locks
// and moves the schedule in the transaction that records the run).
func (m *Maintenance) scheduleLoop(ctx context.Context) {
	t := time.NewTicker(orDefault(m.ScheduleInterval, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !m.down() {
				m.fireDueSchedules(ctx)
			}
		}
	}
}

// fireDueSchedules fires until fewer than a batch were due.
func (m *Maintenance) fireDueSchedules(ctx context.Context) {
	for {
		firings, err := m.Engine.FireDueSchedules(ctx, scheduleBatch)
		if err != nil {
			if ctx.Err() == nil {
				m.Log.Error(err, "Firing due schedules failed")
			}
			return
		}
		schedules := map[string]bool{}
		for _, f := range firings {
			switch f.Outcome {
			case engine.FiringBusy:
				// Still due: not counted, so that a batch of busy ones
				// does not make this loop call again at once.
				m.Log.Info("Schedule tick waits: a run it needs is held by another transaction", "scheduleID", f.ScheduleID,
					"tick", f.Tick)
				continue
			case engine.FiringFailed:
				m.Log.Info("Schedule tick failed; see the schedule's last error", "scheduleID", f.ScheduleID, "tick", f.Tick)
			case engine.FiringFired, engine.FiringReplaced:
				m.Log.V(1).Info("Schedule fired", "scheduleID", f.ScheduleID, "tick", f.Tick, "runID", f.RunID,
					"outcome", f.Outcome)
			}
			schedules[f.ScheduleID] = true
		}
		if m.Schedules != nil && len(firings) > 0 {
			m.Schedules.Fired(ctx, m.Engine, firings)
		}
		if len(schedules) < scheduleBatch {
			return
		}
	}
}

// down reports whether the inbox is known not to answer.
func (m *Maintenance) down() bool { return m.Down != nil && m.Down() }

// inboxName is the inbox's name in metrics.
func (m *Maintenance) inboxName() string {
	if m.Inbox == "" {
		return defaultInbox
	}
	return m.Inbox
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// latestEventID is the id of the newest audit event (0 when there is none).
func (m *Maintenance) latestEventID(ctx context.Context) int64 {
	id, err := m.Engine.LatestEventID(ctx)
	if err != nil && ctx.Err() == nil {
		m.Log.Error(err, "Reading the latest audit event failed")
	}
	return id
}

// refreshMetrics counts the runs by state, the transitions after
// lastEventID and the durations of the runs finished after finishedSince
// (within lookback of the database's clock if it is behind it), and
// returns where to count from next.
func (m *Maintenance) refreshMetrics(ctx context.Context, lastEventID int64, finishedSince time.Time,
	lookback time.Duration) (int64, time.Time) {
	counts, err := m.Engine.RunsByPrefix(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.Log.Error(err, "Refreshing run metrics failed")
		}
		return lastEventID, finishedSince
	}
	inbox := prometheus.Labels{"inbox": m.inboxName()}
	m.Metrics.Runs.DeletePartialMatch(inbox)
	labels := newSeriesLabels()
	for _, c := range counts {
		ns, prefix := labels.of(c.Namespace, c.Prefix)
		m.Metrics.Runs.WithLabelValues(m.inboxName(), ns, prefix, string(c.Status)).Add(float64(c.Count))
	}
	ages, err := m.Engine.OldestRunnableAge(ctx)
	if err == nil {
		m.Metrics.OldestRunnableAge.DeletePartialMatch(inbox)
		oldest := map[[2]string]float64{}
		for _, a := range ages {
			ns, prefix := labels.of(a.Namespace, a.Prefix)
			k := [2]string{ns, prefix}
			oldest[k] = max(oldest[k], a.Age.Seconds())
		}
		for k, age := range oldest {
			m.Metrics.OldestRunnableAge.WithLabelValues(m.inboxName(), k[0], k[1]).Set(age)
		}
	}
	evs, maxID, err := m.Engine.CountEventsAfter(ctx, lastEventID)
	if err == nil {
		// Present from the first refresh, so that a rate over it starts at 0.
		expiries := m.Metrics.LeaseExpiries.WithLabelValues(m.inboxName())
		for _, e := range evs {
			m.Metrics.Transitions.WithLabelValues(m.inboxName(), string(e.Type)).Add(float64(e.Count))
			expiries.Add(float64(e.LeaseExpiries))
		}
		lastEventID = maxID
	}
	finished, next, err := m.Engine.RunsFinishedSince(ctx, finishedSince, lookback)
	if err == nil {
		for _, f := range finished {
			ns, prefix := labels.of(f.Namespace, f.Prefix)
			m.Metrics.RunDuration.WithLabelValues(m.inboxName(), ns, prefix, string(f.Status)).Observe(f.Duration.Seconds())
		}
		finishedSince = next
	}
	return lastEventID, finishedSince
}
