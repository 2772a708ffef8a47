package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// LogLevel is a run log line's level.
type LogLevel string

// The levels a run log keeps.
const (
	LogDebug LogLevel = "debug"
	LogInfo  LogLevel = "info"
	LogWarn  LogLevel = "warn"
	LogError LogLevel = "error"
)

// MaxLogMessageBytes is the most of one message a run log keeps: the
// database cuts a longer one (and says how long it was).
const MaxLogMessageBytes = 8192

// Limits of one AppendRunLogs call (the database refuses more).
const (
	MaxLogAttemptsPerCall = 1000
	MaxLogLinesPerCall    = 10000
)

// LogLine is one line of a run's log.
type LogLine struct {
	At      time.Time
	Level   LogLevel
	Message string
}

// AttemptLog is what a worker sends of one attempt it holds: its lines,
// oldest first, and how many it dropped before sending.
type AttemptLog struct {
	LeaseRef
	Lines   []LogLine
	Dropped int64
}

// AppendRunLogs keeps the log lines of attempts the worker holds, each
// attempt within its namespace's limits (workflow_settings.max_log_lines
// and max_log_bytes, or workflow_namespace_settings'): the oldest lines
// are dropped and counted. It returns the ids of the runs whose lease the
// worker no longer holds (their lines were not kept). Messages must be
// valid UTF-8 without NUL bytes (Postgres text); one over
// MaxLogMessageBytes is cut.
func (e *Engine) AppendRunLogs(ctx context.Context, workerID string, logs []AttemptLog) (lost []string, err error) {
	if len(logs) == 0 {
		return nil, nil
	}
	n := len(logs)
	ids, tokens, dropped := make([]string, n), make([]int64, n), make([]int64, n)
	var lineRuns []string
	var ats []time.Time
	var levels, messages []string
	for i, l := range logs {
		ids[i], tokens[i], dropped[i] = l.ID, l.Token, l.Dropped
		for _, line := range l.Lines {
			lineRuns = append(lineRuns, l.ID)
			ats = append(ats, line.At)
			levels = append(levels, string(line.Level))
			messages = append(messages, line.Message)
		}
	}
	rows, err := e.pool.Query(ctx, e.q[qLogAppend], pgx.NamedArgs{
		"worker_id": workerID, "ids": ids, "tokens": tokens, "dropped": dropped,
		"line_runs": lineRuns, "line_ats": ats, "line_levels": levels, "line_messages": messages,
	})
	if err != nil {
		return nil, translate("append run logs", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var kept bool
		if err := rows.Scan(&id, &kept); err != nil {
			return nil, translate("append run logs", err)
		}
		if !kept {
			lost = append(lost, id)
		}
	}
	return lost, translate("append run logs", rows.Err())
}

// RunLogLine is a kept line of a run's log.
type RunLogLine struct {
	Attempt int
	Seq     int64
	LogLine
}

// RunLogs returns up to limit (1 to 10,000) lines of a run's log after the
// line (afterAttempt, afterSeq), in order; (0, 0) reads from the first.
// None when the run is missing or the caller may not read it.
func (e *Engine) RunLogs(ctx context.Context, runID string, afterAttempt int, afterSeq int64, limit int) ([]RunLogLine, error) {
	rows, err := e.pool.Query(ctx, e.q[qLogList], pgx.NamedArgs{"id": runID, "after_attempt": afterAttempt,
		"after_seq": afterSeq, "limit": limit})
	if err != nil {
		return nil, translate("read the log of run "+runID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunLogLine, error) {
		var l RunLogLine
		var level string
		err := row.Scan(&l.Attempt, &l.Seq, &l.At, &level, &l.Message)
		l.Level = LogLevel(level)
		return l, err
	})
	return out, translate("read the log of run "+runID, err)
}

// AttemptLogSummary says what the log of one attempt holds.
type AttemptLogSummary struct {
	Attempt int
	// Lines and Bytes are the lines kept and the octets of their messages.
	Lines int
	Bytes int64
	// Dropped counts the attempt's lines dropped (the oldest), by the
	// worker or by the database's limits.
	Dropped int64
	// FirstSeq is the number of the first line kept.
	FirstSeq int64
}

// RunLogAttempts returns, per attempt of a run that logged, what its log
// holds, in attempt order.
func (e *Engine) RunLogAttempts(ctx context.Context, runID string) ([]AttemptLogSummary, error) {
	rows, err := e.pool.Query(ctx, e.q[qLogAttempts], pgx.NamedArgs{"id": runID})
	if err != nil {
		return nil, translate("read the log of run "+runID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AttemptLogSummary, error) {
		var a AttemptLogSummary
		err := row.Scan(&a.Attempt, &a.Lines, &a.Bytes, &a.Dropped, &a.FirstSeq)
		return a, err
	})
	return out, translate("read the log of run "+runID, err)
}
