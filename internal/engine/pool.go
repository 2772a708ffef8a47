package engine

import (
	"context"
	"fmt"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
)

// PoolQuery describes one worker pool for QueueDepths.
type PoolQuery struct {
	// TypePrefixes the pool's workers claim (literal prefixes).
	TypePrefixes []string
	// Runtime of the pool's workers.
	Runtime string
	// Cap bounds each count (0: exact). The autoscaler passes the most runs
	// the pool can use (maxReplicas × runsPerReplica): past it the desired
	// replica count no longer changes, and counting stops there.
	Cap int64
	// Namespace is the namespace whose runs the pool's workers claim
	// (empty: "default").
	Namespace string
}

// QueueDepth is what waits for one pool.
type QueueDepth struct {
	// Runnable runs: pending, due, claimable by the pool's runtime (at most
	// the pool's Cap, when it has one).
	Runnable int64
	// Leased runs whose type matches the pool's prefixes (at most the Cap).
	Leased int64
}

// QueueDepths measures the queue of every pool with one query (by
// workflow.queue_depth, one call per pool, each counting up to the pool's
// Cap); the result is indexed like pools.
func (e *Engine) QueueDepths(ctx context.Context, pools []PoolQuery) ([]QueueDepth, error) {
	out := make([]QueueDepth, len(pools))
	var ids []int32
	var prefixes, runtimes, namespaces []string
	var caps []int64
	for i, p := range pools {
		if p.Cap < 0 {
			return nil, fmt.Errorf("measure queue depth: pool %d has a negative cap %d", i, p.Cap)
		}
		for _, pre := range p.TypePrefixes {
			ids = append(ids, int32(i))
			prefixes = append(prefixes, pre)
			runtimes = append(runtimes, p.Runtime)
			caps = append(caps, p.Cap)
			ns := p.Namespace
			if ns == "" {
				ns = DefaultNamespace
			}
			namespaces = append(namespaces, ns)
		}
	}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := e.q.PoolQueueDepth(ctx, queries.PoolQueueDepthParams{
		PoolIds: ids, Prefixes: prefixes, Runtimes: runtimes, Caps: caps, Namespaces: namespaces,
	})
	if err != nil {
		return nil, translate("measure queue depth", err)
	}
	for _, row := range rows {
		i := int(deref(row.Pool))
		if i < 0 || i >= len(out) {
			return nil, fmt.Errorf("measure queue depth: pool index %d out of range", i)
		}
		out[i] = QueueDepth{Runnable: deref(row.Runnable), Leased: deref(row.Leased)}
	}
	return out, nil
}
