package engine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PoolQuery describes one worker pool for QueueDepths.
type PoolQuery struct {
	// TypePrefixes the pool's workers claim (literal prefixes).
	TypePrefixes []string
	// Runtime of the pool's workers.
	Runtime string
}

// QueueDepth is what waits for one pool.
type QueueDepth struct {
	// Runnable runs: pending, due, claimable by the pool's runtime.
	Runnable int64
	// Leased runs whose type matches the pool's prefixes.
	Leased int64
}

// QueueDepths measures the queue of every pool with one query (by
// workflow.queue_depth, one call per pool); the result is indexed like pools.
func (e *Engine) QueueDepths(ctx context.Context, pools []PoolQuery) ([]QueueDepth, error) {
	out := make([]QueueDepth, len(pools))
	var ids []int32
	var prefixes, runtimes []string
	for i, p := range pools {
		for _, pre := range p.TypePrefixes {
			ids = append(ids, int32(i))
			prefixes = append(prefixes, pre)
			runtimes = append(runtimes, p.Runtime)
		}
	}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := e.pool.Query(ctx, e.q[qPoolQueueDepth], pgx.NamedArgs{
		"pool_ids": ids, "prefixes": prefixes, "runtimes": runtimes,
	})
	if err != nil {
		return nil, translate("measure queue depth", err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int32
		var d QueueDepth
		if err := rows.Scan(&i, &d.Runnable, &d.Leased); err != nil {
			return nil, translate("measure queue depth", err)
		}
		if int(i) < 0 || int(i) >= len(out) {
			return nil, fmt.Errorf("measure queue depth: pool index %d out of range", i)
		}
		out[i] = d
	}
	return out, translate("measure queue depth", rows.Err())
}
