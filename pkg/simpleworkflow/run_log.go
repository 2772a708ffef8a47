package simpleworkflow

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
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
// sends them (logSender, every interval and before the attempt's outcome is written).
type runLog struct {
	mu      sync.Mutex
	lines   []engine.LogLine
	bytes   int
	dropped int64
	// inflight counts the sends under way with lines (or a count) taken
	// from here: until they answer, what they carry is still pending.
	inflight int
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

// take returns and forgets what is held, at most max lines, the oldest
// first, and the count dropped so far (once), for a send: settle must
// follow once the send answered.
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
	l.inflight++
	return lines, dropped
}

// settle ends a send of what take returned: when it failed, those lines
// count as dropped (the next send says so).
func (l *runLog) settle(failed bool, lines int, dropped int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
	if failed && !l.closed {
		l.dropped += int64(lines) + dropped
	}
}

// pending reports whether there is anything to send, or a send under way
// that carries some.
func (l *runLog) pending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines) > 0 || l.dropped > 0 || l.inflight > 0
}

// waiting reports whether there is anything to send.
func (l *runLog) waiting() bool {
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
// then its attributes as key=value, groups as dotted keys), unless the
// handler is replaying its journal, and every record to the worker's own
// handler too, with the run's id, type and attempt.
type runLogHandler struct {
	log   *runLog
	level slog.Leveler
	// replaying reports that the handler runs again what its journal
	// recorded: what it logs then was kept the first time.
	replaying func() bool
	next      slog.Handler
	// prefix is the open groups' path ("a.b."); bound the attributes
	// given to WithAttrs, formatted.
	prefix string
	bound  []byte
}

func (h *runLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level.Level() || h.next.Enabled(ctx, l)
}

func (h *runLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= h.level.Level() && !h.replaying() {
		buf := append([]byte(r.Message), h.bound...)
		r.Attrs(func(a slog.Attr) bool {
			buf = appendAttr(buf, h.prefix, a)
			return true
		})
		at := r.Time
		if at.IsZero() {
			at = time.Now()
		}
		h.log.add(at, levelOf(r.Level), string(buf))
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *runLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.bound = append([]byte(nil), h.bound...)
	for _, a := range attrs {
		c.bound = appendAttr(c.bound, h.prefix, a)
	}
	c.next = h.next.WithAttrs(attrs)
	return &c
}

func (h *runLogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "."
	c.next = h.next.WithGroup(name)
	return &c
}

// appendAttr appends " key=value" for an attribute (each of a group's,
// its key a prefix); empty attributes and groups add nothing.
func appendAttr(buf []byte, prefix string, a slog.Attr) []byte {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return buf
	}
	if a.Value.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			buf = appendAttr(buf, p, g)
		}
		return buf
	}
	buf = append(buf, ' ')
	buf = appendText(buf, prefix+a.Key)
	buf = append(buf, '=')
	var v string
	switch a.Value.Kind() {
	case slog.KindTime:
		v = a.Value.Time().Format(time.RFC3339Nano)
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			v = err.Error()
		} else {
			v = fmt.Sprint(a.Value.Any())
		}
	default:
		v = a.Value.String()
	}
	return appendText(buf, v)
}

// appendText appends s, quoted when it is empty or holds a space, '=', a
// quote or anything unprintable.
func appendText(buf []byte, s string) []byte {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return r == ' ' || r == '=' || r == '"' || !unicode.IsPrint(r)
	}) {
		return append(buf, s...)
	}
	return strconv.AppendQuote(buf, s)
}

// newRunLogger returns the logger a handler gets for one attempt.
func (s *session) newRunLogger(l *runLog, id, typ string, attempt int, replaying func() bool) *slog.Logger {
	next := s.log.With("run_id", id, "type", typ, "attempt", attempt).Handler()
	return slog.New(&runLogHandler{log: l, level: s.cfg.RunLogLevel, replaying: replaying, next: next})
}

// logSender sends what the handlers logged, every interval
// (PollerConfig.LogFlushInterval) and before each outcome is written.
type logSender struct {
	loop
	eng      *engine.Engine
	workerID string
	log      *slog.Logger
	interval time.Duration
	// running returns the runs whose handlers still run.
	running func() []*activeRun
	// mu makes sends one at a time (see send).
	mu sync.Mutex
}

// Start runs the log sender until Stop.
func (l *logSender) Start(ctx context.Context) { l.start(ctx, l.run) }

// Stop ends the log sender and waits for it.
func (l *logSender) Stop() { l.stop() }

func (l *logSender) run(ctx context.Context) {
	ticker := time.NewTicker(l.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		l.send(ctx, l.running())
	}
}

// runningRuns returns the runs whose handlers still run.
func (s *session) runningRuns() []*activeRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	runs := make([]*activeRun, 0, len(s.active))
	for _, a := range s.active {
		if !a.done {
			runs = append(runs, a)
		}
	}
	return runs
}

// send sends what the runs' handlers logged, in calls within the
// database's bounds, at most maxBufferedLogLines of each run a call of
// send (a handler that logs faster than they are sent holds up no other
// run). Sends are one at a time: one called for runs with a send under way
// waits for it, so an outcome written after send comes after every line
// its handler logged. A run whose lease is gone keeps nothing more.
func (l *logSender) send(ctx context.Context, runs []*activeRun) {
	due := false
	for _, a := range runs {
		if a.log.pending() {
			due = true
			break
		}
	}
	if !due {
		return // most runs log nothing: no call, no wait
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	type taken struct {
		run     *activeRun
		lines   int
		dropped int64
	}
	var batch []engine.AttemptLog
	var owners []taken
	lines := 0
	send := func() {
		if len(batch) == 0 {
			return
		}
		lost, err := l.eng.AppendRunLogs(ctx, l.workerID, batch)
		if err != nil && ctx.Err() == nil {
			l.log.Warn("Sending run logs failed; their lines count as dropped", "error", err, "runs", len(batch))
		}
		gone := make(map[string]bool, len(lost))
		for _, id := range lost {
			gone[id] = true
		}
		for _, o := range owners {
			o.run.log.settle(err != nil, o.lines, o.dropped)
			if gone[o.run.ref.ID] {
				o.run.log.close()
			}
		}
		batch, owners, lines = batch[:0], owners[:0], 0
	}
	for _, a := range runs {
		budget := maxBufferedLogLines
		for first := true; budget > 0 && a.log.waiting(); first = false {
			// A call holds each run once: more of the same run goes in
			// the next call.
			if !first || len(batch) == engine.MaxLogAttemptsPerCall || lines == engine.MaxLogLinesPerCall {
				send()
			}
			got, dropped := a.log.take(min(budget, engine.MaxLogLinesPerCall-lines))
			batch = append(batch, engine.AttemptLog{LeaseRef: a.ref, Lines: got, Dropped: dropped})
			owners = append(owners, taken{run: a, lines: len(got), dropped: dropped})
			lines += len(got)
			budget -= max(len(got), 1)
		}
	}
	send()
}
