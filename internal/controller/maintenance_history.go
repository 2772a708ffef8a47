package controller

import "context"

// historyAhead is how many spans past the one in progress have their
// partition of the audit trail made in advance: a manager down for a
// little less than that still finds every new run's trail a partition.
const historyAhead = 2

// historyDropsPerPass bounds the partitions one retention pass drops.
const historyDropsPerPass = 100

// prepareHistory makes the audit trail's partitions for the span in
// progress and the next historyAhead spans.
func (m *Maintenance) prepareHistory(ctx context.Context) {
	n, err := m.Engine.PrepareHistoryPartitions(ctx, historyAhead)
	if err != nil {
		if ctx.Err() == nil {
			m.Log.Error(err, "Preparing partitions of the audit trail failed")
		}
		return
	}
	if n > 0 {
		m.Log.Info("Prepared partitions of the audit trail", "partitions", n)
	}
}

// dropHistory drops the audit trail's partitions that retention emptied.
func (m *Maintenance) dropHistory(ctx context.Context) {
	n, busy, err := m.Engine.DropHistoryPartitions(ctx, m.Retention, historyDropsPerPass)
	if err != nil {
		if ctx.Err() == nil {
			m.Log.Error(err, "Dropping partitions of the audit trail failed")
		}
		return
	}
	if n > 0 {
		m.Log.Info("Dropped partitions of the audit trail", "partitions", n, "retention", m.Retention)
	}
	if busy {
		// A transaction held the trail past the drop's lock timeout (one
		// left idle in a transaction, for one): the next pass tries again.
		// Name whose sessions hold it, so that an operator can end them.
		holders, err := m.Engine.MaintenanceBlockers(ctx)
		if err != nil {
			m.Log.Error(err, "Listing the sessions that hold the audit trail failed")
		}
		who := make([]string, len(holders))
		for i, h := range holders {
			who[i] = h.String()
		}
		m.Log.Info("A partition of the audit trail due to be dropped was busy; trying again at the next pass",
			"heldBy", who)
	}
}
