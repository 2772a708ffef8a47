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
	rows, err := e.pool.Query(ctx, `
select r.id::text, r.source_namespace, r.source_name, coalesce(r.source_uid, '')
from workflow.workflow_run r
where r.id = any (array(select x::uuid from unnest($1::text[]) x
                        where x ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                        limit 10000))
  and r.source_name is not null`, ids)
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
