package engine

import (
	"context"
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
	rows, err := e.q.RunSources(ctx, ids)
	if err != nil {
		return nil, translate("look up the objects of changed runs", err)
	}
	out := make([]MirroredRun, len(rows))
	for i, row := range rows {
		out[i] = MirroredRun{ID: deref(row.ID), Source: Source{Namespace: deref(row.SourceNamespace),
			Name: deref(row.SourceName), UID: deref(row.SourceUid)}}
	}
	return out, nil
}
