package engine

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"
)

//go:embed queries/*.sql
var queryFiles embed.FS

// Names of the queries in queries/*.sql.
const (
	qRunInsert             = "RunInsert"
	qRunIDByIdempotencyKey = "RunIDByIdempotencyKey"
	qRunGet                = "RunGet"
	qRunList               = "RunList"
	qRunCancel             = "RunCancel"
	qRunRetry              = "RunRetry"
	qRunClaim              = "RunClaim"
	qRunHeartbeat          = "RunHeartbeat"
	qRunComplete           = "RunComplete"
	qRunFail               = "RunFail"
	qRunRelease            = "RunRelease"
	qRunReapExpired        = "RunReapExpired"
	qRunDeleteFinished     = "RunDeleteFinished"
	qHistoryPrepare        = "HistoryPrepare"
	qHistoryDrop           = "HistoryDrop"
	qHistoryList           = "HistoryList"
	qRunExpireDeadlines    = "RunExpireDeadlines"
	qRunChildren           = "RunChildren"
	qStepRecord            = "StepRecord"
	qStepPark              = "StepPark"
	qStepStartChild        = "StepStartChild"
	qStepList              = "StepList"
	qSignalSend            = "SignalSend"
	qSignalList            = "SignalList"
	qEventList             = "EventList"
	qEventListAfter        = "EventListAfter"
	qEventCountsAfter      = "EventCountsAfter"
	qEventLatestID         = "EventLatestID"
	qRegistryListByOwner   = "RegistryListByOwner"
	qStatsRunsByPrefix     = "StatsRunsByPrefix"
	qPoolQueueDepth        = "PoolQueueDepth"
	qStatsOldestRunnable   = "StatsOldestRunnable"
	qStatsFinishedSince    = "StatsFinishedSince"
	qRegistryUpsert        = "RegistryUpsert"
	qRegistryGet           = "RegistryGet"
	qRegistryDelete        = "RegistryDelete"
	qDAGSteps              = "DAGSteps"
	qNamespaceGrant        = "NamespaceGrant"
	qNamespaceRevoke       = "NamespaceRevoke"
	qLogAppend             = "LogAppend"
	qLogList               = "LogList"
	qLogAttempts           = "LogAttempts"
)

// queries maps a query name to its SQL text.
type queries map[string]string

// loadQueries parses the embedded query files: each query starts with a
// "-- name: X" line and runs until the next one.
func loadQueries() (queries, error) {
	q := queries{}
	err := fs.WalkDir(queryFiles, "queries", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		text, err := queryFiles.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		var name string
		var body strings.Builder
		flush := func() error {
			if name == "" {
				return nil
			}
			if _, dup := q[name]; dup {
				return fmt.Errorf("%s: query %q defined twice", path, name)
			}
			q[name] = strings.TrimSpace(body.String())
			body.Reset()
			return nil
		}
		for line := range strings.SplitSeq(string(text), "\n") {
			if rest, ok := strings.CutPrefix(line, "-- name: "); ok {
				if err := flush(); err != nil {
					return err
				}
				name = strings.TrimSpace(rest)
				continue
			}
			if name != "" {
				body.WriteString(line)
				body.WriteByte('\n')
			}
		}
		return flush()
	})
	if err != nil {
		return nil, err
	}
	for _, n := range []string{
		qRunInsert, qRunIDByIdempotencyKey, qRunGet, qRunList, qRunCancel, qRunRetry, qRunClaim,
		qRunHeartbeat, qRunComplete, qRunFail, qRunRelease, qRunReapExpired,
		qRunDeleteFinished, qEventList, qEventListAfter, qEventCountsAfter, qEventLatestID, qRegistryListByOwner, qStatsRunsByPrefix, qPoolQueueDepth, qStatsOldestRunnable, qStatsFinishedSince, qRegistryUpsert, qRegistryGet, qRegistryDelete,
		qRunExpireDeadlines, qRunChildren, qStepRecord, qStepPark, qStepStartChild, qStepList,
		qSignalSend, qSignalList, qRunStepSummary, qDAGSteps, qRunCreateMany,
		qHistoryPrepare, qHistoryDrop, qHistoryList, qNamespaceGrant, qNamespaceRevoke,
		qLogAppend, qLogList, qLogAttempts,
	} {
		if q[n] == "" {
			return nil, fmt.Errorf("query %q is missing from queries/*.sql", n)
		}
	}
	return q, nil
}
