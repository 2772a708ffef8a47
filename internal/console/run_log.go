package console

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// maxLogLines bounds the lines of an attempt's log a run's page shows (the
// newest); the whole kept log is at /runs/{id}/log?attempt=N.
const maxLogLines = 500

// logAttempt is what one attempt's log keeps.
type logAttempt struct {
	Attempt  int
	Lines    int
	Bytes    int64
	Dropped  int64
	FirstSeq int64
}

// logLine is one line of a run's log.
type logLine struct {
	Seq     int64
	At      time.Time
	Level   string
	Message string
}

// runLog is the log section of a run's page: the attempts that logged,
// the one shown, its newest lines, and how many are not shown.
type runLog struct {
	Attempts []logAttempt
	Shown    *logAttempt
	Lines    []logLine
	// Hidden counts the kept lines older than those shown.
	Hidden int
}

// loadLogAttempts reads what each attempt's log of a run keeps.
func (src *source) loadLogAttempts(ctx context.Context, id string) ([]logAttempt, error) {
	rows, err := src.db.Query(ctx, `select attempt, lines, bytes, dropped, first_seq from workflow.run_log_attempts($1::uuid)`, id)
	if err != nil {
		return nil, fmt.Errorf("run %s: log: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (logAttempt, error) {
		var a logAttempt
		return a, row.Scan(&a.Attempt, &a.Lines, &a.Bytes, &a.Dropped, &a.FirstSeq)
	})
	if err != nil {
		return nil, fmt.Errorf("run %s: log: %w", id, err)
	}
	return out, nil
}

// readLog calls fn with up to limit lines of attempt's log after line
// after, in order, at most 10,000 a query.
func (src *source) readLog(ctx context.Context, id string, attempt int, after int64, limit int, fn func(logLine)) error {
	for limit > 0 {
		rows, err := src.db.Query(ctx, `select attempt, seq, logged_at, level, message
from workflow.run_logs($1::uuid, $2::integer, $3::bigint, $4::integer)`, id, attempt, after, min(limit, 10000))
		if err != nil {
			return fmt.Errorf("run %s: log: %w", id, err)
		}
		var a int
		var l logLine
		n := 0
		if _, err := pgx.ForEachRow(rows, []any{&a, &l.Seq, &l.At, &l.Level, &l.Message}, func() error {
			if a != attempt {
				return nil // the next attempt's
			}
			fn(l)
			after = l.Seq
			n++
			return nil
		}); err != nil {
			return fmt.Errorf("run %s: log: %w", id, err)
		}
		if n == 0 {
			return nil
		}
		limit -= n
	}
	return nil
}

// loadLog reads the log section of a run's page: the newest lines of the
// attempt asked for (the latest that logged when none is, or it did not).
func (src *source) loadLog(ctx context.Context, id, asked string) (runLog, error) {
	var l runLog
	attempts, err := src.loadLogAttempts(ctx, id)
	if err != nil || len(attempts) == 0 {
		return l, err
	}
	l.Attempts = attempts
	l.Shown = &l.Attempts[len(l.Attempts)-1]
	if n, err := strconv.Atoi(asked); err == nil {
		for i := range l.Attempts {
			if l.Attempts[i].Attempt == n {
				l.Shown = &l.Attempts[i]
			}
		}
	}
	l.Hidden = max(0, l.Shown.Lines-maxLogLines)
	after := l.Shown.FirstSeq - 1 + int64(l.Hidden)
	err = src.readLog(ctx, id, l.Shown.Attempt, after, maxLogLines, func(line logLine) { l.Lines = append(l.Lines, line) })
	return l, err
}

// serveRunLog serves the whole kept log of one attempt of a run as plain
// text: a line per record, its time, level and message (a message's own
// line breaks indented).
func (s *Server) serveRunLog(w http.ResponseWriter, r *http.Request) {
	id := strings.ToLower(r.PathValue("id"))
	attempt, err := strconv.Atoi(r.URL.Query().Get("attempt"))
	if !engine.IsRunID(id) || err != nil || attempt < 1 {
		http.Error(w, "ask for /runs/{id}/log?attempt=N: a run's id and an attempt from 1", http.StatusBadRequest)
		return
	}
	src, problems, err := s.findRun(r.Context(), accessOf(r.Context()), id)
	if err != nil {
		http.Error(w, "the run could not be read from the database", http.StatusInternalServerError)
		return
	}
	if src == nil {
		status := http.StatusNotFound
		if len(problems) > 0 {
			status = http.StatusServiceUnavailable
		}
		http.Error(w, "no such run in the inboxes the console reads", status)
		return
	}
	ctx, cancel := s.inboxes.bounded(r.Context())
	defer cancel()
	attempts, err := src.loadLogAttempts(ctx, id)
	if err != nil {
		http.Error(w, "the run's log could not be read from the database", http.StatusInternalServerError)
		return
	}
	var shown *logAttempt
	for i := range attempts {
		if attempts[i].Attempt == attempt {
			shown = &attempts[i]
		}
	}
	if shown == nil {
		http.Error(w, fmt.Sprintf("attempt %d of run %s logged nothing", attempt, id), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if shown.Dropped > 0 {
		fmt.Fprintf(w, "[%d earlier lines dropped]\n", shown.Dropped)
	}
	indent := strings.NewReplacer("\r\n", "\n    ", "\n", "\n    ", "\r", "\n    ")
	if err := src.readLog(ctx, id, attempt, shown.FirstSeq-1, shown.Lines, func(l logLine) {
		fmt.Fprintf(w, "%s %-5s %s\n", l.At.UTC().Format(time.RFC3339Nano), strings.ToUpper(l.Level), indent.Replace(l.Message))
	}); err != nil {
		// The status is sent: the text says it stops short.
		s.log.Error("Console could not read a run's log to its end", "run", id, "error", err)
		fmt.Fprintln(w, "[the rest of the log could not be read]")
	}
}
