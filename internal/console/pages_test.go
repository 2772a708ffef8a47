package console_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/simple-workflow/simple-workflow/internal/console"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

var runLink = regexp.MustCompile(`href="/runs/([0-9a-f-]{36})"`)

func TestPagesShowRunsAndEscapeWhatTheyShow(t *testing.T) {
	e := setup(t, console.WorkerPool{Namespace: "team-a", Registry: "billing", Target: "billing-workers",
		Runtime: "go", Prefixes: []string{"billing."}})
	hostile := `{"note": "<script>alert(1)</script>", "img": "<img src=x onerror=alert(2)>"}`
	id := e.create(t, engine.CreateParams{Type: "billing.invoice.v1", Payload: json.RawMessage(hostile),
		Source: &engine.Source{Namespace: "team-a", Name: "inv-1", UID: "u-1"}})
	other := e.create(t, engine.CreateParams{Type: "mail.send.v1", MaxAttempts: 1})
	c := e.claim(t, "billing.", 1)
	e.complete(t, c[0], `{"total": "<b>42</b>"}`)
	c = e.claim(t, "mail.", 1)
	e.fail(t, c[0], `smtp said <script>document.title='pwned'</script>`)
	e.create(t, engine.CreateParams{Type: "billing.invoice.v1"}) // waits

	code, body := e.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	mustContain(t, "overview", body, `team-a/billing`, `billing-workers`, `<code>billing.</code>`,
		`data-type="billing.invoice.v1"`, `data-type="mail.send.v1"`, `<svg class="chart"`)
	// One billing run waits: the pool's runnable count and the type's.
	if !regexp.MustCompile(`<td class="num">1</td><td class="num">0</td>\s*</tr>`).MatchString(body) {
		t.Fatalf("overview: the pool does not show one runnable run:\n%s", body)
	}

	code, body = e.get(t, "/runs/"+id)
	if code != http.StatusOK {
		t.Fatalf("run page: %d\n%s", code, body)
	}
	if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") || strings.Contains(body, "<b>42") {
		t.Fatalf("the run page shows user data as markup:\n%s", body)
	}
	mustContain(t, "run page", body, `&lt;script&gt;alert(1)&lt;/script&gt;`, `&lt;b&gt;42&lt;/b&gt;`,
		`<span class="status succeeded" id="status">succeeded</span>`, `WorkflowRun team-a/inv-1`,
		`<li class="event created">`, `<li class="event succeeded">`, `<td>test-worker</td>`)

	code, body = e.get(t, "/runs/"+other)
	if code != http.StatusOK || strings.Contains(body, "<script>document") {
		t.Fatalf("failed run page: %d\n%s", code, body)
	}
	mustContain(t, "failed run page", body, `&lt;script&gt;document.title=`, `class="status failed"`)

	code, body = e.get(t, "/runs")
	if code != http.StatusOK {
		t.Fatalf("runs: %d\n%s", code, body)
	}
	if n := len(runLink.FindAllString(body, -1)); n != 3 {
		t.Fatalf("runs page lists %d runs, want 3:\n%s", n, body)
	}
	if strings.Contains(body, "<script>document") {
		t.Fatalf("runs page shows an error as markup:\n%s", body)
	}
}

func TestRunsPageFiltersAndPages(t *testing.T) {
	e := setup(t)
	ids := map[string]bool{}
	for i := range 120 {
		p := engine.CreateParams{Type: fmt.Sprintf("report.build_%d.v1", i%3)}
		if i%4 == 0 {
			p.Source = &engine.Source{Namespace: "team-b", Name: fmt.Sprintf("r-%d", i), UID: fmt.Sprintf("u-%d", i)}
		}
		ids[e.create(t, p)] = true
	}
	mail := e.create(t, engine.CreateParams{Type: "mail.send.v1", MaxAttempts: 1})
	c := e.claim(t, "mail.", 1)
	e.fail(t, c[0], "boom")

	// Every report run once, over three pages, newest first.
	seen := map[string]bool{}
	path := "/runs?prefix=report."
	var last time.Time
	for pageNo := 1; path != ""; pageNo++ {
		code, body := e.get(t, path)
		if code != http.StatusOK {
			t.Fatalf("page %d: %d\n%s", pageNo, code, body)
		}
		for _, m := range runLink.FindAllStringSubmatch(body, -1) {
			if seen[m[1]] || !ids[m[1]] {
				t.Fatalf("page %d lists %s twice or a run not under report.", pageNo, m[1])
			}
			seen[m[1]] = true
		}
		for _, m := range regexp.MustCompile(`title="([0-9-]+ [0-9:]+Z)"`).FindAllStringSubmatch(body, -1) {
			at, err := time.Parse("2006-01-02 15:04:05Z", m[1])
			if err != nil {
				t.Fatal(err)
			}
			if !last.IsZero() && at.After(last) {
				t.Fatalf("page %d is not newest first", pageNo)
			}
			last = at
		}
		path = ""
		if m := regexp.MustCompile(`id="next" href="([^"]+)"`).FindStringSubmatch(body); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
			if pageNo == 3 {
				t.Fatalf("a fourth page is offered: %s", path)
			}
		}
	}
	if len(seen) != 120 {
		t.Fatalf("the pages listed %d report runs, want 120", len(seen))
	}

	_, body := e.get(t, "/runs?status=failed")
	if got := runLink.FindAllStringSubmatch(body, -1); len(got) != 1 || got[0][1] != mail {
		t.Fatalf("status=failed lists %v, want only %s", got, mail)
	}
	_, body = e.get(t, "/runs?namespace=team-b")
	if n := len(runLink.FindAllString(body, -1)); n != 30 {
		t.Fatalf("namespace=team-b lists %d runs, want 30", n)
	}
	_, body = e.get(t, "/runs?prefix=report.build_1.&status=pending")
	if n := len(runLink.FindAllString(body, -1)); n != 40 {
		t.Fatalf("prefix and status list %d runs, want 40", n)
	}
	future := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04")
	_, body = e.get(t, "/runs?from="+future)
	mustContain(t, "a window in the future", body, `id="no-runs"`)
	_, body = e.get(t, "/runs?to="+future+"&prefix=mail.")
	if n := len(runLink.FindAllString(body, -1)); n != 1 {
		t.Fatalf("to= lists %d mail runs, want 1", n)
	}
}

func TestConsoleRefusesBadInputAndWrites(t *testing.T) {
	e := setup(t)
	for path, want := range map[string]string{
		"/runs?status=bogus": "status must be one of",
		"/runs?prefix=x'%3B+drop+table+workflow.workflow_run--": "type prefix may hold only",
		"/runs?namespace=Team_A":                                "namespace must be",
		"/runs?from=yesterday":                                  "from must be a time",
		"/runs?after=not-a-cursor":                              "after is not a cursor",
		"/runs?prefix=a%00b":                                    "prefix is not a usable value",
		"/runs?prefix=" + strings.Repeat("a", 600):              "prefix is not a usable value",
	} {
		code, body := e.get(t, path)
		if code != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", path, code)
		}
		mustContain(t, path, body, want)
	}
	for _, path := range []string{"/runs/not-a-uuid", "/runs/00000000-0000-4000-8000-000000000000", "/nowhere"} {
		if code, _ := e.get(t, path); code != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", path, code)
		}
	}
	resp, err := http.Post(e.base+"/runs", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: status %d, want 405", resp.StatusCode)
	}
	resp, err = http.Get(e.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy is %q", csp)
	}
	if code, body := e.get(t, "/static/console.js"); code != http.StatusOK || !strings.Contains(body, "EventSource") {
		t.Errorf("console.js: %d", code)
	}

	// The console's connections can read, and nothing else.
	var role string
	if err := e.reader.QueryRow(e.ctx, "select current_user").Scan(&role); err != nil || role != console.DefaultRole {
		t.Fatalf("the console reads as %q (%v), want %s", role, err, console.DefaultRole)
	}
	for _, sql := range []string{
		`insert into workflow.workflow_run (type) values ('x.v1')`,
		`update workflow.workflow_run set status = 'cancelled'`,
		`select workflow.cancel_run(gen_random_uuid())`,
	} {
		if _, err := e.reader.Exec(e.ctx, sql); err == nil {
			t.Errorf("the console's pool could run %s", sql)
		}
		if _, err := e.reader.Exec(e.ctx, "begin read write; "+sql+"; commit"); err == nil {
			t.Errorf("the console's pool could run %s in a read-write transaction", sql)
		}
	}
}

func TestRunPageDrawsADAGAndItsSteps(t *testing.T) {
	e := setup(t)
	def := &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{
		{Name: "fetch", Type: "etl.fetch.v1"},
		{Name: "clean", Type: "etl.clean.v1", DependsOn: []string{"fetch"}},
		{Name: "report", Type: "etl.report.v1", DependsOn: []string{"fetch"}},
		{Name: "publish", Type: "etl.publish.v1", DependsOn: []string{"clean", "report"}},
		{Name: "notify", Type: "etl.notify.v1", Final: true},
	}}
	if err := e.eng.UpsertRegistryEntry(e.ctx, engine.RegistryEntry{WorkflowName: "etl.pipeline.v1", Enabled: true,
		Definition: def}); err != nil {
		t.Fatal(err)
	}
	id := e.create(t, engine.CreateParams{Type: "etl.pipeline.v1"})
	c := e.claim(t, "etl.fetch.", 1)
	if len(c) != 1 {
		t.Fatalf("the DAG's first step was not started: %v", c)
	}
	e.complete(t, c[0], `{}`)
	code, body := e.get(t, "/runs/"+id)
	if code != http.StatusOK {
		t.Fatalf("run page: %d\n%s", code, body)
	}
	mustContain(t, "DAG run page", body, `<svg class="dag" id="dag"`,
		`<g class="node succeeded" data-step="fetch">`, `<g class="node pending" data-step="clean">`,
		`<g class="node pending" data-step="report">`, `<g class="node waiting" data-step="publish">`,
		`<g class="node waiting final" data-step="notify">`, `>notify (final)</text>`)
	// The final step is drawn in a column of its own, after publish (the
	// third column: x = 10 + 3 × 250).
	mustContain(t, "DAG run page", body, `data-step="notify"><title>notify: etl.notify.v1 (waiting)</title>
    <rect x="760"`)
	if n := strings.Count(body, "<line "); n != 4 {
		t.Fatalf("the graph has %d edges, want 4", n)
	}
	mustContain(t, "DAG run page", body, `<table id="children">`)
}

func TestConsoleAnswersOnlyToLocalAndClusterHostNames(t *testing.T) {
	e := setup(t)
	for host, want := range map[string]int{
		"127.0.0.1:8082": 200, "localhost:8082": 200, "[::1]:8082": 200, "10.1.2.3": 200,
		"sw-simple-workflow-console.simple-workflow-system.svc:8082":               200,
		"sw-simple-workflow-console.simple-workflow-system.svc.cluster.local:8082": 200,
		"attacker.example:8082": 421, "127.0.0.1.nip.io": 421, "a.svc.evil.example": 421, "console.svc.cluster.local.evil.example": 421,
	} {
		_, code, _ := e.serveHost(t, "/runs", host)
		if code != want {
			t.Errorf("Host %s: %d, want %d", host, code, want)
		}
	}
	if code, _ := e.get(t, "/static/"); code != http.StatusNotFound {
		t.Errorf("/static/ lists its directory: %d", code)
	}
}

func TestRunPageEscapesWorkersAndStepErrorsAndTakesUpperCaseIDs(t *testing.T) {
	e := setup(t)
	id := e.create(t, engine.CreateParams{Type: "hostile.job.v1"})
	worker := `<img src=x onerror=alert(3)>`
	runs, err := e.eng.ClaimRuns(e.ctx, engine.ClaimParams{WorkerID: worker, TypePrefixes: []string{"hostile."},
		Limit: 1, LeaseDuration: time.Minute})
	if err != nil || len(runs) != 1 {
		t.Fatalf("claim: %v %v", runs, err)
	}
	code, body := e.get(t, "/runs/"+strings.ToUpper(id))
	if code != http.StatusOK {
		t.Fatalf("upper-case id: %d", code)
	}
	if strings.Contains(body, "<img src=x") {
		t.Fatalf("the worker id is shown as markup:\n%s", body)
	}
	mustContain(t, "run page", body, `&lt;img src=x onerror=alert(3)&gt;`)

	def := &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{{Name: "only", Type: "hostile.step.v1", MaxAttempts: 1}}}
	if err := e.eng.UpsertRegistryEntry(e.ctx, engine.RegistryEntry{WorkflowName: "hostile.flow.v1", Enabled: true, Definition: def}); err != nil {
		t.Fatal(err)
	}
	flow := e.create(t, engine.CreateParams{Type: "hostile.flow.v1"})
	c := e.claim(t, "hostile.step.", 1)
	e.fail(t, c[0], `</title><script>alert(4)</script>`)
	_, body = e.get(t, "/runs/"+flow)
	if strings.Contains(body, "<script>alert(4)") {
		t.Fatalf("a step's error is shown as markup in the graph:\n%s", body)
	}
	mustContain(t, "DAG page", body, `&lt;/title&gt;&lt;script&gt;alert(4)&lt;/script&gt;`)
}

func TestPagesOfRunsCreatedTogetherAndBigJournals(t *testing.T) {
	e := setup(t)
	// 120 runs of one transaction share their creation time: the pages
	// still list each once (the id breaks the tie).
	ps := make([]engine.CreateParams, 120)
	for i := range ps {
		ps[i] = engine.CreateParams{Type: "batch.job.v1"}
	}
	if _, err := e.eng.CreateRuns(e.ctx, ps); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for path := "/runs?prefix=batch."; path != ""; {
		_, body := e.get(t, path)
		for _, m := range runLink.FindAllStringSubmatch(body, -1) {
			if seen[m[1]] {
				t.Fatalf("%s listed twice", m[1])
			}
			seen[m[1]] = true
		}
		path = ""
		if m := regexp.MustCompile(`id="next" href="([^"]+)"`).FindStringSubmatch(body); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if len(seen) != 120 {
		t.Fatalf("listed %d of 120 runs created together", len(seen))
	}

	// A run with a journal of 400 steps of 100 kB each: its page shows the
	// first 300, each cut, and stays small.
	id := e.create(t, engine.CreateParams{Type: "batch.big.v1"})
	if _, err := e.owner.Exec(e.ctx, `
insert into workflow.workflow_step (run_id, name, position, kind, outcome, output, attempt, finished_at)
select $1, 'step-' || i, i, 'step', 'ok', jsonb_build_object('blob', repeat('x', 100000)), 1, now()
from generate_series(0, 399) i`, id); err != nil {
		t.Fatal(err)
	}
	code, body := e.get(t, "/runs/"+id)
	if code != http.StatusOK {
		t.Fatalf("big journal: %d", code)
	}
	mustContain(t, "big journal", body, "The first steps only.", "step-299", "(cut; the whole value is in the database)")
	if strings.Contains(body, "step-300<") {
		t.Fatal("the page shows more than 300 steps")
	}
	if len(body) > 3<<20 {
		t.Fatalf("the page of a big journal is %d bytes", len(body))
	}

	// 'infinity' is no time a run can start at: refused by the database.
	_, err := e.owner.Exec(e.ctx, `insert into workflow.workflow_run (type, run_at) values ('batch.job.v1', 'infinity')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.ConstraintName != "workflow_run_times_finite" {
		t.Fatalf("run_at infinity: %v, want the rule workflow_run_times_finite", err)
	}
}

// The largest and deepest values the inbox keeps (a payload near 1 MiB, one
// nested 63 levels, a 256 KiB signal payload) are shown on their run's page,
// cut to the page's bounds, and a bystander's run of another namespace is
// listed and shown as before, also after a burst of refused filters.
func TestConsoleShowsTheLargestValuesBesideABystander(t *testing.T) {
	e := setup(t)
	bystander := e.create(t, engine.CreateParams{Type: "team_b.job.v1", Payload: json.RawMessage(`{"mine": true}`),
		Source: &engine.Source{Namespace: "team-b", Name: "keep", UID: "uid-b"}})
	big := e.create(t, engine.CreateParams{Type: "team_a.big.v1",
		Payload: json.RawMessage(`{"s": "` + strings.Repeat("x", 1_000_000) + `"}`)})
	deep := e.create(t, engine.CreateParams{Type: "team_a.deep.v1",
		Payload: json.RawMessage(strings.Repeat(`{"a":`, 63) + "{}" + strings.Repeat("}", 63))})
	if _, err := e.eng.SendSignal(e.ctx, engine.SignalParams{RunID: deep, Name: "bulky",
		Payload: json.RawMessage(`{"s": "` + strings.Repeat("y", 262_000) + `"}`)}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{big, deep} {
		code, body := e.get(t, "/runs/"+id)
		if code != http.StatusOK || len(body) > 512<<10 {
			t.Fatalf("run %s: status %d, %d bytes of page", id, code, len(body))
		}
	}
	for _, bad := range []string{"/runs?prefix=" + strings.Repeat("a", 600), "/runs?status=bogus", "/runs?namespace=Team_A"} {
		if code, _ := e.get(t, bad); code != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400", bad, code)
		}
	}
	code, body := e.get(t, "/runs?namespace=team-b")
	if code != http.StatusOK || !strings.Contains(body, bystander) {
		t.Fatalf("the bystander's run is not listed in its namespace (status %d)", code)
	}
	if code, body := e.get(t, "/runs/"+bystander); code != http.StatusOK || !strings.Contains(body, "mine") {
		t.Fatalf("the bystander's run page: status %d", code)
	}
}

// A run retried from where it stopped shows when, from what and who asked
// (escaped), and its attempts table keeps each attempt's own outcome; a
// DAG's step retried with it links to its workflow.
func TestRunPageShowsRetriesFromFailure(t *testing.T) {
	e := setup(t)
	id := e.create(t, engine.CreateParams{Type: "again.job.v1", MaxAttempts: 1})
	c := e.claim(t, "again.job.", 1)
	e.fail(t, c[0], "carrier down")
	if err := e.eng.RetryRun(e.ctx, engine.RetryParams{ID: id, By: `<b>ops</b>`}); err != nil {
		t.Fatal(err)
	}
	_, body := e.get(t, "/runs/"+id)
	mustContain(t, "run page", body, "Retried from where it stopped")
	mustContain(t, "run page", body, "was failed; asked by &lt;b&gt;ops&lt;/b&gt;")
	if strings.Contains(body, "<b>ops</b>") {
		t.Fatalf("who asked is shown as markup:\n%s", body)
	}
	mustContain(t, "attempts", body, `<span class="status failed">failed</span>`)

	// Who asked, oversized and NUL-laden, is kept cut to 256 bytes; another
	// team's run beside it shows no retry and is unharmed.
	other := e.create(t, engine.CreateParams{Type: "again.other.v1", Source: &engine.Source{Namespace: "team-b", Name: "b-1", UID: "u-b"}})
	huge := e.create(t, engine.CreateParams{Type: "again.huge.v1", MaxAttempts: 1})
	h := e.claim(t, "again.huge.", 1)
	e.fail(t, h[0], "boom")
	if err := e.eng.RetryRun(e.ctx, engine.RetryParams{ID: huge, By: strings.Repeat("\x00<i>x</i>", 2000)}); err != nil {
		t.Fatalf("a retry asked for by an oversized label: %v", err)
	}
	_, body = e.get(t, "/runs/"+huge)
	list := body[strings.Index(body, `<ul id="retries">`):]
	list = list[:strings.Index(list, "</ul>")]
	if strings.Contains(body, "<i>x</i>") || strings.Count(list, "&lt;i&gt;x&lt;/i&gt;") != 256/len("<i>x</i>") {
		t.Fatalf("who asked is shown as markup or not cut to 256 bytes: %s", list)
	}
	mustContain(t, "run page", body, "asked by &lt;i&gt;x&lt;/i&gt;")
	code, body := e.get(t, "/runs/"+other)
	if code != http.StatusOK || strings.Contains(body, "Retried from where it stopped") {
		t.Fatalf("the other team's run page: %d, shows a retry: %v", code, strings.Contains(body, "Retried from where it stopped"))
	}
	if r, err := e.eng.GetRun(e.ctx, other); err != nil || r.Status != engine.StatusPending || r.Attempt != 0 {
		t.Fatalf("the other team's run is %s at attempt %d (%v)", r.Status, r.Attempt, err)
	}

	def := &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{{Name: "only", Type: "again.step.v1", MaxAttempts: 1}}}
	if err := e.eng.UpsertRegistryEntry(e.ctx, engine.RegistryEntry{WorkflowName: "again.flow.v1", Enabled: true, Definition: def}); err != nil {
		t.Fatal(err)
	}
	flow := e.create(t, engine.CreateParams{Type: "again.flow.v1"})
	s := e.claim(t, "again.step.", 1)
	e.fail(t, s[0], "boom")
	if err := e.eng.RetryRun(e.ctx, engine.RetryParams{ID: flow}); err != nil {
		t.Fatal(err)
	}
	_, body = e.get(t, "/runs/"+flow)
	mustContain(t, "DAG page", body, "was failed, 1 step(s) ran again")
	_, body = e.get(t, "/runs/"+s[0].ID)
	mustContain(t, "step page", body, `with its workflow <a href="/runs/`+flow+`">`)
}

// A step its condition skipped is drawn as skipped; a step that fans out
// shows how many of its elements ended.
func TestRunPageDrawsSkippedSteps(t *testing.T) {
	e := setup(t)
	def := &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{
		{Name: "always", Type: "cond.always.v1"},
		{Name: "never", Type: "cond.never.v1", When: "$.payload.go == true"},
		{Name: "each", Type: "cond.each.v1", ForEach: "$.payload.items"},
	}}
	if err := e.eng.UpsertRegistryEntry(e.ctx, engine.RegistryEntry{WorkflowName: "cond.flow.v1", Enabled: true, Definition: def}); err != nil {
		t.Fatal(err)
	}
	id := e.create(t, engine.CreateParams{Type: "cond.flow.v1", Payload: []byte(`{"go": false, "items": [1, 2, 3]}`)})
	c := e.claim(t, "cond.each.", 3)
	e.complete(t, c[0], `{}`)
	_, body := e.get(t, "/runs/"+id)
	mustContain(t, "DAG page", body, `<g class="node pending" data-step="always">`, `<g class="node skipped" data-step="never">`,
		`<g class="node leased" data-step="each">`, `leased · 1/3 elements</text>`)
}
