package engine

import (
	"context"
	"time"
)

// HistoryPartition is one time partition of the audit trail: the trails of
// the runs created in [From, To).
type HistoryPartition struct {
	// Name is the partition's table name in the workflow schema.
	Name string
	// From and To bound the creation times of the runs whose trails it holds.
	From, To time.Time
	// RunsLeft tells whether a run of that span is still in the inbox.
	RunsLeft bool
	// Bytes is the partition's size on disk, indexes included.
	Bytes int64
}

// PrepareHistoryPartitions makes sure the audit trail has a partition for
// the span in progress and the ahead spans after it, and returns how many it
// made.
func (e *Engine) PrepareHistoryPartitions(ctx context.Context, ahead int) (int, error) {
	n, err := e.q.HistoryPrepare(ctx, clamp32(ahead))
	if err != nil {
		return 0, translate("prepare history partitions", err)
	}
	return int(deref(n)), nil
}

// DropHistoryPartitions drops the partitions of the audit trail whose runs
// retention deleted, and those older than retention and one span whatever
// is left (the trails of at most 10,000 runs left move to the default
// partition first), one per transaction, at most limit, and returns how
// many it dropped. busy tells that it stopped at a partition it could not
// lock within its lock timeout (a transaction held the trail): the next
// call tries again.
func (e *Engine) DropHistoryPartitions(ctx context.Context, retention time.Duration, limit int) (dropped int, busy bool, err error) {
	for dropped < limit {
		got, err := e.q.HistoryDrop(ctx, retention.Milliseconds())
		if err != nil {
			return dropped, false, translate("drop history partitions", err)
		}
		n := int(deref(got))
		if n < 0 {
			return dropped, true, nil
		}
		if n == 0 {
			break
		}
		dropped += n
	}
	return dropped, false, nil
}

// HistoryPartitions lists the time partitions of the audit trail, oldest
// first.
func (e *Engine) HistoryPartitions(ctx context.Context) ([]HistoryPartition, error) {
	rows, err := e.q.HistoryList(ctx)
	if err != nil {
		return nil, translate("list history partitions", err)
	}
	parts := make([]HistoryPartition, len(rows))
	for i, row := range rows {
		parts[i] = HistoryPartition{Name: deref(row.PartitionName), From: deref(row.FromTime), To: deref(row.ToTime),
			RunsLeft: deref(row.RunsLeft), Bytes: deref(row.Bytes)}
	}
	return parts, nil
}
