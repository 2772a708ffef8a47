package simpleworkflow

import (
	"context"
	"time"
)

// LogLine is a line a run's handler logged through Task.Logger.
type LogLine struct {
	// Attempt is the attempt that logged it; Seq its number within the
	// attempt, from 1.
	Attempt int
	Seq     int64
	// At is when it was logged, by the worker's clock.
	At time.Time
	// Level is debug, info, warn or error.
	Level string
	// Message is the record's message followed by its attributes as
	// key=value (at most 8 KiB: a longer one is cut and says so).
	Message string
}

// AttemptLog says what is kept of one attempt's log.
type AttemptLog struct {
	Attempt int
	// Lines and Bytes are the lines kept and the octets of their messages.
	Lines int
	Bytes int64
	// Dropped counts the attempt's oldest lines that were not kept (past
	// the database owner's limits, or the worker's buffer).
	Dropped int64
	// FirstSeq is the number of the first line kept.
	FirstSeq int64
}

// Logs returns up to limit lines (1 to 10,000) of a run's log after the
// line (afterAttempt, afterSeq), in order: (0, 0) reads from the first, and
// the last line returned is where to read on from. None when the run is
// missing or of a namespace the login does not read.
func (c *Client) Logs(ctx context.Context, runID string, afterAttempt int, afterSeq int64, limit int) ([]LogLine, error) {
	lines, err := c.eng.RunLogs(ctx, runID, afterAttempt, afterSeq, limit)
	if err != nil {
		return nil, err
	}
	out := make([]LogLine, len(lines))
	for i, l := range lines {
		out[i] = LogLine{Attempt: l.Attempt, Seq: l.Seq, At: l.At, Level: string(l.Level), Message: l.Message}
	}
	return out, nil
}

// LogAttempts returns, per attempt of a run that logged, what its log
// keeps and how many lines it dropped, in attempt order.
func (c *Client) LogAttempts(ctx context.Context, runID string) ([]AttemptLog, error) {
	sums, err := c.eng.RunLogAttempts(ctx, runID)
	if err != nil {
		return nil, err
	}
	out := make([]AttemptLog, len(sums))
	for i, s := range sums {
		out[i] = AttemptLog{Attempt: s.Attempt, Lines: s.Lines, Bytes: s.Bytes, Dropped: s.Dropped, FirstSeq: s.FirstSeq}
	}
	return out, nil
}
