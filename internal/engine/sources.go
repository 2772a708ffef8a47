package engine

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// MirroredRun names the Kubernetes object a run was mirrored from.
type MirroredRun struct {
	ID     string
	Source Source
}

// SourcesOf returns the objects the given runs were mirrored from, for the
// ids of ChannelRunChanged notifications; ids of runs that are gone, are
// not mirrored or are not valid ids are left out. At most 10,000 ids.
func (e *Engine) SourcesOf(ctx context.Context, ids []string) ([]MirroredRun, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := e.pool.Query(ctx, `select id, source_namespace, source_name, source_uid from workflow.run_sources($1)`, ids)
	if err != nil {
		return nil, translate("look up the objects of changed runs", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MirroredRun, error) {
		var m MirroredRun
		err := r.Scan(&m.ID, &m.Source.Namespace, &m.Source.Name, &m.Source.UID)
		return m, err
	})
	if err != nil {
		return nil, translate("look up the objects of changed runs", err)
	}
	return out, nil
}
