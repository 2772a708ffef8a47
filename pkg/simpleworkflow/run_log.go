package simpleworkflow

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Bounds of what a worker holds of one attempt's log between two sends:
// past them the oldest lines are dropped and counted (the database says
// how many beside the lines it keeps). The database's own limits per
// attempt (workflow_settings.max_log_lines and max_log_bytes) are the
// owner's, and usually lower.
const (
	maxBufferedLogLines = 2000
	maxBufferedLogBytes = 2 << 20
)

// runLog holds the lines an attempt's handler logged until the worker
// sends them (logLoop, and before the attempt's outcome is written).
type runLog struct {
	mu      sync.Mutex
	lines   []engine.LogLine
	bytes   int
	dropped int64
	// closed is set once the lease is gone: lines are no longer kept.
	closed bool
}

// add keeps a line, dropping the oldest past the buffer's bounds.
func (l *runLog) add(at time.Time, level engine.LogLevel, msg string) {
	msg = logText(msg)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.lines = append(l.lines, engine.LogLine{At: at, Level: level, Message: msg})
	l.bytes += len(msg)
	drop := 0
	for len(l.lines)-drop > maxBufferedLogLines || (l.bytes > maxBufferedLogBytes && len(l.lines)-drop > 1) {
		l.bytes -= len(l.lines[drop].Message)
		drop++
	}
	if drop > 0 {
		l.lines = append(l.lines[:0], l.lines[drop:]...)
		l.dropped += int64(drop)
	}
}

// take returns and forgets what is held: at most max lines, the oldest
// first, and the count dropped so far (once).
func (l *runLog) take(maxLines int) ([]engine.LogLine, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := min(len(l.lines), maxLines)
	lines := append([]engine.LogLine(nil), l.lines[:n]...)
	l.lines = append(l.lines[:0], l.lines[n:]...)
	for _, line := range lines {
		l.bytes -= len(line.Message)
	}
	dropped := l.dropped
	l.dropped = 0
	return lines, dropped
}

// pending reports whether there is anything to send.
func (l *runLog) pending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines) > 0 || l.dropped > 0
}

// close stops keeping lines (the lease is gone) and forgets what is held.
func (l *runLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed, l.lines, l.bytes, l.dropped = true, nil, 0, 0
}

// logText returns msg as the database keeps it: valid UTF-8 without NUL
// bytes, at most engine.MaxLogMessageBytes (cut at a character, saying
// how long it was).
func logText(msg string) string {
	if strings.IndexByte(msg, 0) >= 0 || !utf8.ValidString(msg) {
		msg = strings.ReplaceAll(strings.ToValidUTF8(msg, "\uFFFD"), "\x00", "\uFFFD")
	}
	if len(msg) <= engine.MaxLogMessageBytes {
		return msg
	}
	note := fmt.Sprintf(" [cut: %d bytes]", len(msg))
	cut := engine.MaxLogMessageBytes - len(note)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + note
}

// levelOf maps a slog level to the run log's.
func levelOf(l slog.Level) engine.LogLevel {
	switch {
	case l >= slog.LevelError:
		return engine.LogError
	case l >= slog.LevelWarn:
		return engine.LogWarn
	case l >= slog.LevelInfo:
		return engine.LogInfo
	default:
		return engine.LogDebug
	}
}

// runLogHandler is the slog.Handler of a handler's Task.Logger: each record
// at or above the poller's RunLogLevel goes to the run's log (its message,
// then its attributes as key=value), unless the handler is replaying its
// journal, and every record to the worker's own handler too, with the
// run's id, type and attempt.
type runLogHandler struct {
	log   *runLog
	level slog.Leveler
	// replaying reports that the handler runs again what its journal
	// recorded: what it logs then was kept the first time.
	replaying func() bool
	next      slog.Handler
	// ops are the WithAttrs and WithGroup calls made, in order.
	ops []func(slog.Handler) slog.Handler
}

func (h *runLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level.Level() || h.next.Enabled(ctx, l)
}

func (h *runLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= h.level.Level() && !h.replaying() {
		var buf bytes.Buffer
		var text slog.Handler = slog.NewTextHandler(&buf, &slog.HandlerOptions{
			Level: slog.LevelDebug,
			ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
				if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
					return slog.Attr{}
				}
				return a
			},
		})
		for _, op := range h.ops {
			text = op(text)
		}
		_ = text.Handle(ctx, r)
		msg := r.Message
		if attrs := strings.TrimSpace(buf.String()); attrs != "" {
			msg += " " + attrs
		}
		at := r.Time
		if at.IsZero() {
			at = time.Now()
		}
		h.log.add(at, levelOf(r.Level), msg)
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *runLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.with(func(t slog.Handler) slog.Handler { return t.WithAttrs(attrs) }, h.next.WithAttrs(attrs))
}

func (h *runLogHandler) WithGroup(name string) slog.Handler {
	return h.with(func(t slog.Handler) slog.Handler { return t.WithGroup(name) }, h.next.WithGroup(name))
}

func (h *runLogHandler) with(op func(slog.Handler) slog.Handler, next slog.Handler) slog.Handler {
	ops := append(append([]func(slog.Handler) slog.Handler(nil), h.ops...), op)
	return &runLogHandler{log: h.log, level: h.level, replaying: h.replaying, next: next, ops: ops}
}

// newRunLogger returns the logger a handler gets for one attempt.
func (s *session) newRunLogger(l *runLog, c engine.ClaimedRun, replaying func() bool) *slog.Logger {
	next := s.log.With("run_id", c.ID, "type", c.Type, "attempt", c.Attempt).Handler()
	return slog.New(&runLogHandler{log: l, level: s.cfg.RunLogLevel, replaying: replaying, next: next})
}

// logLoop sends what the handlers logged every LogFlushInterval.
func (s *session) logLoop(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.LogFlushInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		s.mu.Lock()
		runs := make([]*activeRun, 0, len(s.active))
		for _, a := range s.active {
			if !a.done {
				runs = append(runs, a)
			}
		}
		s.mu.Unlock()
		s.sendLogs(ctx, runs)
	}
}

// sendLogs sends what the runs' handlers logged, in calls within the
// database's bounds. A run whose lease is gone keeps nothing more.
func (s *session) sendLogs(ctx context.Context, runs []*activeRun) {
	due := 0
	for _, a := range runs {
		if a.log.pending() {
			due++
		}
	}
	if due == 0 {
		return // most runs log nothing: no call, no wait
	}
	s.logSend.Lock()
	defer s.logSend.Unlock()
	var batch []engine.AttemptLog
	var owners []*activeRun
	lines := 0
	send := func() {
		if len(batch) == 0 {
			return
		}
		lost, err := s.eng.AppendRunLogs(ctx, s.cfg.WorkerID, batch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("Sending run logs failed; their lines are dropped", "error", err, "runs", len(batch))
			}
		}
		for _, id := range lost {
			for _, a := range owners {
				if a.ref.ID == id {
					a.log.close()
				}
			}
		}
		batch, owners, lines = batch[:0], owners[:0], 0
	}
	for _, a := range runs {
		for a.log.pending() {
			if len(batch) == engine.MaxLogAttemptsPerCall || lines == engine.MaxLogLinesPerCall {
				send()
			}
			taken, dropped := a.log.take(engine.MaxLogLinesPerCall - lines)
			batch = append(batch, engine.AttemptLog{LeaseRef: a.ref, Lines: taken, Dropped: dropped})
			owners = append(owners, a)
			lines += len(taken)
		}
	}
	send()
}
