package engine

import (
	"context"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
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
	rows, err := e.q.LogAppend(ctx, queries.LogAppendParams{
		WorkerID: workerID, Ids: ids, Tokens: tokens, Dropped: dropped,
		LineRuns: lineRuns, LineAts: ats, LineLevels: levels, LineMessages: messages,
	})
	if err != nil {
		return nil, translate("append run logs", err)
	}
	for _, row := range rows {
		if !deref(row.Kept) {
			lost = append(lost, deref(row.ID))
		}
	}
	return lost, nil
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
	rows, err := e.q.LogList(ctx, queries.LogListParams{
		ID: runID, AfterAttempt: clamp32(afterAttempt), AfterSeq: afterSeq, MaxRows: clamp32(limit),
	})
	if err != nil {
		return nil, translate("read the log of run "+runID, err)
	}
	out := make([]RunLogLine, len(rows))
	for i, row := range rows {
		out[i] = RunLogLine{Attempt: int(deref(row.Attempt)), Seq: deref(row.Seq), LogLine: LogLine{
			At: deref(row.LoggedAt), Level: LogLevel(deref(row.Level)), Message: deref(row.Message)}}
	}
	return out, nil
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
	rows, err := e.q.LogAttempts(ctx, runID)
	if err != nil {
		return nil, translate("read the log of run "+runID, err)
	}
	out := make([]AttemptLogSummary, len(rows))
	for i, row := range rows {
		out[i] = AttemptLogSummary{Attempt: int(deref(row.Attempt)), Lines: int(deref(row.Lines)),
			Bytes: deref(row.Bytes), Dropped: deref(row.Dropped), FirstSeq: deref(row.FirstSeq)}
	}
	return out, nil
}
