package console_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// A run's page shows its handlers' logs per attempt, the newest lines
// first cut to the page's bound, says how many the attempt dropped and how
// many are kept but not shown, escapes what a handler logged, and offers
// the whole kept log as plain text; a run that logged nothing says so.
func TestRunPageShowsTheLogOfEachAttempt(t *testing.T) {
	e := setup(t)
	if _, err := e.owner.Exec(e.ctx, "update workflow.workflow_settings set max_log_lines = 600"); err != nil {
		t.Fatal(err)
	}
	id := e.create(t, engine.CreateParams{Type: "logged.job.v1", MaxAttempts: 2})
	quiet := e.create(t, engine.CreateParams{Type: "quiet.job.v1"})
	c := e.claim(t, "logged.", 1)[0]
	send := func(c engine.ClaimedRun, lines []engine.LogLine, dropped int64) {
		t.Helper()
		if lost, err := e.eng.AppendRunLogs(e.ctx, "test-worker", []engine.AttemptLog{{LeaseRef: c.Ref(), Lines: lines, Dropped: dropped}}); err != nil || len(lost) != 0 {
			t.Fatalf("append: %v %v", lost, err)
		}
	}
	send(c, []engine.LogLine{
		{At: time.Now(), Level: engine.LogWarn, Message: `<script>alert(5)</script> first attempt`},
		{At: time.Now(), Level: engine.LogInfo, Message: "two\nlines"},
	}, 0)
	if _, err := e.eng.FailRuns(e.ctx, "test-worker", []engine.Failure{{LeaseRef: c.Ref(), Error: "boom", Retryable: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.owner.Exec(e.ctx, "update workflow.workflow_settings set clock_offset = clock_offset + interval '1 hour'"); err != nil {
		t.Fatal(err)
	}
	c2 := e.claim(t, "logged.", 1)[0]
	var many []engine.LogLine
	for i := range 700 {
		many = append(many, engine.LogLine{At: time.Now(), Level: engine.LogInfo, Message: fmt.Sprintf("line %d", i)})
	}
	send(c2, many, 5)

	code, body := e.get(t, "/runs/"+id)
	if code != http.StatusOK {
		t.Fatalf("run page: %d\n%s", code, body)
	}
	// Attempt 2 by default: 600 kept of 700 (+5 the worker dropped), the
	// newest 500 shown.
	mustContain(t, "run page", body, `105 earlier line(s) dropped`, `100 earlier line(s) kept, not shown here.`,
		`line 699`, `line 200`, `href="?log=1#logs"`, `/runs/`+id+`/log?attempt=2`)
	if strings.Contains(body, "line 199<") {
		t.Fatal("the page shows more than the newest 500 lines")
	}
	_, body = e.get(t, "/runs/"+id+"?log=1")
	if strings.Contains(body, "<script>alert(5)") {
		t.Fatalf("a log line is shown as markup:\n%s", body)
	}
	mustContain(t, "attempt 1's log", body, `&lt;script&gt;alert(5)&lt;/script&gt; first attempt`, `<strong>attempt 1</strong>`)
	for _, asked := range []string{"?log=99", "?log=-1", "?log=%00", "?log=" + strings.Repeat("9", 5000)} {
		if code, body := e.get(t, "/runs/"+id+asked); code != http.StatusOK || !strings.Contains(body, "<strong>attempt 2</strong>") {
			t.Fatalf("%s: %d, want attempt 2's log shown", asked, code)
		}
	}

	code, text := e.get(t, "/runs/"+id+"/log?attempt=2")
	if code != http.StatusOK || !strings.HasPrefix(text, "[105 earlier lines dropped]\n") || strings.Count(text, "\n") != 601 ||
		!strings.HasSuffix(text, " INFO  line 699\n") {
		t.Fatalf("the whole log: %d, %d lines, begins %q", code, strings.Count(text, "\n"), text[:min(len(text), 80)])
	}
	code, text = e.get(t, "/runs/"+id+"/log?attempt=1")
	if code != http.StatusOK || !strings.Contains(text, "INFO  two\n    lines\n") {
		t.Fatalf("attempt 1 as text: %d %q", code, text)
	}
	for path, want := range map[string]int{
		"/runs/" + id + "/log?attempt=3":                           http.StatusNotFound,
		"/runs/" + id + "/log":                                     http.StatusBadRequest,
		"/runs/" + id + "/log?attempt=x":                           http.StatusBadRequest,
		"/runs/not-a-run/log?attempt=1":                            http.StatusBadRequest,
		"/runs/" + quiet + "/log?attempt=1":                        http.StatusNotFound,
		"/runs/0b6c5a6e-8d7e-4f43-9f51-3c1e1f0f7d3a/log?attempt=1": http.StatusNotFound,
	} {
		if code, _ := e.get(t, path); code != want {
			t.Errorf("%s: %d, want %d", path, code, want)
		}
	}
	_, body = e.get(t, "/runs/"+quiet)
	mustContain(t, "a quiet run's page", body, "Its handlers logged nothing")
}
