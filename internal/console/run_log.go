package console

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// maxLogLines bounds the lines of an attempt's log a run's page shows (the
// newest); the whole kept log is at /runs/{id}/log?attempt=N.
const maxLogLines = 500

// runLog is the log section of a run's page: the attempts that logged,
// the one shown, its newest lines, and how many are not shown.
type runLog struct {
	Attempts []engine.AttemptLogSummary
	Shown    *engine.AttemptLogSummary
	Lines    []engine.RunLogLine
	// Hidden counts the kept lines older than those shown.
	Hidden int
}

// readLog calls fn with up to limit lines of attempt's log after line
// after, in order, at most 10,000 a read.
func (src *source) readLog(ctx context.Context, id string, attempt int, after int64, limit int, fn func(engine.RunLogLine)) error {
	for limit > 0 {
		lines, err := src.eng.RunLogs(ctx, id, attempt, after, min(limit, 10000))
		if err != nil {
			return err
		}
		n := 0
		for _, l := range lines {
			if l.Attempt != attempt {
				break // the next attempt's
			}
			fn(l)
			after = l.Seq
			n++
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
	attempts, err := src.eng.RunLogAttempts(ctx, id)
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
	err = src.readLog(ctx, id, l.Shown.Attempt, after, maxLogLines, func(line engine.RunLogLine) { l.Lines = append(l.Lines, line) })
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
	attempts, err := src.eng.RunLogAttempts(ctx, id)
	if err != nil {
		http.Error(w, "the run's log could not be read from the database", http.StatusInternalServerError)
		return
	}
	var shown *engine.AttemptLogSummary
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
	if err := src.readLog(ctx, id, attempt, shown.FirstSeq-1, shown.Lines, func(l engine.RunLogLine) {
		fmt.Fprintf(w, "%s %-5s %s\n", l.At.UTC().Format(time.RFC3339Nano), strings.ToUpper(string(l.Level)), indent.Replace(l.Message))
	}); err != nil {
		// The status is sent: the text says it stops short.
		s.log.Error("Console could not read a run's log to its end", "run", id, "error", err)
		fmt.Fprintln(w, "[the rest of the log could not be read]")
	}
}
