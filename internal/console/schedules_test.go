package console_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/simple-workflow/simple-workflow/internal/console"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// putSchedule stores a schedule as the schema's owner (a mirrored one when
// spec has a namespace).
func (e *env) putSchedule(t *testing.T, spec engine.ScheduleSpec) engine.Schedule {
	t.Helper()
	s, err := e.eng.PutSchedule(e.ctx, spec)
	if err != nil {
		t.Fatalf("put schedule %s/%s: %v", spec.Namespace, spec.Name, err)
	}
	return s
}

// tick moves the database clock a minute and a second on and fires the
// due schedules: each schedule of "* * * * *" records one run. It returns
// the runs recorded, by schedule id, with their ticks.
func (e *env) tick(t *testing.T) map[string]engine.ScheduleFiring {
	t.Helper()
	if _, err := e.owner.Exec(e.ctx, `update workflow.workflow_settings set clock_offset = clock_offset + interval '61 seconds'`); err != nil {
		t.Fatal(err)
	}
	got, err := e.eng.FireDueSchedules(e.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	fired := map[string]engine.ScheduleFiring{}
	for _, f := range got {
		if f.Outcome == engine.FiringFired {
			if _, twice := fired[f.ScheduleID]; twice {
				t.Fatalf("schedule %s fired twice in one call: %+v", f.ScheduleID, got)
			}
			fired[f.ScheduleID] = f
		}
	}
	return fired
}

// runLinks lists the runs a page links to, in the page's order.
func runLinks(body string) []string {
	var out []string
	for _, m := range runLink.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// syncBuffer is a log that tests read while the console writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// loggedConsole serves another console on e's database, unauthenticated,
// logging to the buffer it returns; e.base is pointed at it.
func (e *env) loggedConsole(t *testing.T) *syncBuffer {
	t.Helper()
	logs := &syncBuffer{}
	srv, err := console.New(console.Config{DB: e.reader, Unauthenticated: true,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- srv.ServeListener(ctx, l) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the console ended with %v, want nil after its context ended", err)
		}
	})
	e.console, e.base = srv, "http://"+l.Addr().String()
	return logs
}

// The schedules page lists every schedule with its next and last tick,
// last outcome and error and unfinished runs; a schedule's page lists its
// runs newest first, each linked to its page with its status and tick, and
// none of the runs that merely look alike (another schedule's name that
// starts the same, the same type without the key, another namespace).
// What the pages show is escaped.
func TestSchedulesPagesListSchedulesAndTheirRuns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sqlS := e.putSchedule(t, engine.ScheduleSpec{Name: "nightly-report", Cron: "* * * * *", Type: "report.nightly.v1",
		MaxAttempts: 1})
	k8sS := e.putSchedule(t, engine.ScheduleSpec{Namespace: "team-a", Name: "hourly", UID: "uid-hourly",
		Cron: "* * * * *", TimeZone: "Europe/Berlin", Type: "sync.hourly.v1", ConcurrencyPolicy: engine.ConcurrencyAllow})
	e.putSchedule(t, engine.ScheduleSpec{Namespace: "team-b", Name: "paused", UID: "uid-paused",
		Cron: "0 3 * * *", Type: "sync.paused.v1", Suspend: true})
	// Look-alikes: none is either schedule's.
	lookalike := e.create(t, engine.CreateParams{Type: "report.nightly.v1"})
	e.create(t, engine.CreateParams{Type: "sync.hourly.v1", IdempotencyKey: "k8s:team-a:schedule/hourly-2/1",
		Source: &engine.Source{Namespace: "team-a", Name: "other", UID: "uid-other"}})
	e.create(t, engine.CreateParams{Type: "sync.hourly.v1", IdempotencyKey: "k8s:team-b:schedule/hourly/1",
		Source: &engine.Source{Namespace: "team-b", Name: "other", UID: "uid-other-b"}})
	e.create(t, engine.CreateParams{Type: "sync.hourly.v1", Source: &engine.Source{Namespace: "team-a", Name: "plain", UID: "uid-plain"}})

	var sqlRuns, k8sRuns []engine.ScheduleFiring // oldest first
	for range 3 {
		fired := e.tick(t)
		if len(fired) != 2 {
			t.Fatalf("a tick fired %+v, want both schedules once", fired)
		}
		sqlRuns = append(sqlRuns, fired[sqlS.ID])
		k8sRuns = append(k8sRuns, fired[k8sS.ID])
	}
	// The look-alike of the SQL schedule's type and its first run succeed,
	// its second run fails; the third waits.
	claimed := e.claim(t, "report.nightly.", 3)
	if len(claimed) != 3 {
		t.Fatalf("claimed %d runs, want 3", len(claimed))
	}
	for _, c := range claimed {
		switch c.ID {
		case lookalike, sqlRuns[0].RunID:
			e.complete(t, c, `{}`)
		case sqlRuns[1].RunID:
			e.fail(t, c, "boom")
		default:
			t.Fatalf("claimed %s, the schedule's newest run", c.ID)
		}
	}
	// A run another writer recorded under the SQL schedule's key, with a
	// tick that is no time: listed, its tail shown as text.
	hostileKey := "schedule:" + sqlS.ID + ":<img src=x onerror=alert(1)>"
	hostile := e.create(t, engine.CreateParams{Type: "report.nightly.v1", IdempotencyKey: hostileKey})
	// The mirrored schedule's last outcome is an error holding markup.
	if _, err := e.owner.Exec(e.ctx, `update workflow.workflow_schedule set last_outcome = 'failed',
		last_error = '<script>alert("tick")</script>' where id = $1`, k8sS.ID); err != nil {
		t.Fatal(err)
	}

	code, body := e.get(t, "/schedules")
	if code != http.StatusOK {
		t.Fatalf("schedules: %d\n%s", code, body)
	}
	if strings.Contains(body, "<script>alert") {
		t.Fatalf("the schedules page shows an error as markup:\n%s", body)
	}
	mustContain(t, "schedules page", body, `<a href="/schedules" aria-current="page">Schedules</a>`,
		`href="/schedules/-/nightly-report"`, `href="/schedules/team-a/hourly"`, `href="/schedules/team-b/paused"`,
		`<code>* * * * *</code>`, `Europe/Berlin`, `&lt;script&gt;alert(&#34;tick&#34;)&lt;/script&gt;`,
		`<span class="outcome failed">failed</span>`, `<span class="outcome fired">fired</span>`)
	for _, row := range []struct{ label, unfinished string }{
		{"nightly-report", "2"}, {"team-a/hourly", "3"}, {"team-b/paused", "0"},
	} {
		m := regexp.MustCompile(`(?s)<tr data-schedule="` + regexp.QuoteMeta(row.label) + `">(.*?)</tr>`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no row for %s:\n%s", row.label, body)
		}
		if !strings.Contains(m[1], `<td class="num">`+row.unfinished+`</td>`) {
			t.Errorf("%s does not count %s unfinished runs:\n%s", row.label, row.unfinished, m[1])
		}
	}
	if m := regexp.MustCompile(`(?s)<tr data-schedule="team-b/paused">(.*?)</tr>`).FindStringSubmatch(body); !strings.Contains(m[1], "<td>yes</td>") {
		t.Errorf("the suspended schedule is not shown suspended:\n%s", m[1])
	}
	stored, err := e.eng.GetSchedule(e.ctx, "", "nightly-report")
	if err != nil {
		t.Fatal(err)
	}
	next := stored.NextTickAt.UTC().Format("2006-01-02 15:04:05Z")
	mustContain(t, "schedules page", body, next, sqlRuns[2].Tick.UTC().Format("2006-01-02 15:04:05Z"))

	// The SQL schedule: its four runs, newest first, with their ticks.
	code, body = e.get(t, "/schedules/-/nightly-report")
	if code != http.StatusOK {
		t.Fatalf("SQL schedule page: %d\n%s", code, body)
	}
	want := []string{hostile, sqlRuns[2].RunID, sqlRuns[1].RunID, sqlRuns[0].RunID}
	if got := runLinks(body); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("SQL schedule's runs %v, want %v (newest first)", got, want)
	}
	if strings.Contains(body, "<img src=x") {
		t.Fatalf("a run's key is shown as markup:\n%s", body)
	}
	mustContain(t, "SQL schedule page", body, `<code>&lt;img src=x onerror=alert(1)&gt;</code>`,
		`<span class="status succeeded">succeeded</span>`, `<span class="status failed">failed</span>`,
		`<span class="status pending">pending</span>`, `none: made with SQL`, `<code>report.nightly.v1</code>`)
	for _, f := range sqlRuns {
		mustContain(t, "SQL schedule page", body, f.Tick.UTC().Format("2006-01-02 15:04:05Z"))
	}

	// The mirrored schedule: its three runs, not the look-alikes.
	code, body = e.get(t, "/schedules/team-a/hourly")
	if code != http.StatusOK {
		t.Fatalf("mirrored schedule page: %d\n%s", code, body)
	}
	want = []string{k8sRuns[2].RunID, k8sRuns[1].RunID, k8sRuns[0].RunID}
	if got := runLinks(body); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("mirrored schedule's runs %v, want %v (newest first)", got, want)
	}
	for _, f := range k8sRuns {
		mustContain(t, "mirrored schedule page", body, f.Tick.UTC().Format("2006-01-02 15:04:05Z"))
	}
	mustContain(t, "mirrored schedule page", body, `WorkflowSchedule team-a/hourly`,
		`&lt;script&gt;alert(&#34;tick&#34;)&lt;/script&gt;`)
	if strings.Contains(body, "<script>alert") {
		t.Fatalf("the schedule page shows an error as markup:\n%s", body)
	}
	// Each link leads to the run's page.
	if code, body := e.get(t, "/runs/"+k8sRuns[0].RunID); code != http.StatusOK || !strings.Contains(body, "k8s:team-a:schedule/hourly/") {
		t.Fatalf("the run page of a schedule's run: %d", code)
	}

	code, body = e.get(t, "/schedules/team-b/paused")
	if code != http.StatusOK || !strings.Contains(body, "none while suspended") || !strings.Contains(body, `id="no-runs"`) {
		t.Fatalf("suspended schedule page: %d\n%s", code, body)
	}

	// The engine reads the same function with a smaller limit.
	latest, err := e.eng.ScheduleLatestRuns(e.ctx, "team-a", "hourly", 2)
	if err != nil || len(latest) != 2 || latest[0].ID != k8sRuns[2].RunID || latest[1].ID != k8sRuns[1].RunID {
		t.Fatalf("ScheduleLatestRuns(2): %+v %v", latest, err)
	}
}

// A schedule's page shows its latest 50 runs only.
func TestSchedulePageShowsTheLatestFiftyRuns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := e.putSchedule(t, engine.ScheduleSpec{Namespace: "team-a", Name: "often", UID: "uid-often",
		Cron: "* * * * *", Type: "often.job.v1"})
	var newest string
	for range 53 {
		newest = e.tick(t)[s.ID].RunID
	}
	code, body := e.get(t, "/schedules/team-a/often")
	if code != http.StatusOK {
		t.Fatalf("schedule page: %d", code)
	}
	got := runLinks(body)
	if len(got) != 50 || got[0] != newest {
		t.Fatalf("the page lists %d runs, the first %v; want 50, the first %s", len(got), got[:min(1, len(got))], newest)
	}
	mustContain(t, "schedule page", body, `id="more"`)
}

// Hostile path values are refused (400) or not found (404), and none
// writes an error to the log.
func TestSchedulePageRefusesHostilePaths(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.putSchedule(t, engine.ScheduleSpec{Namespace: "team-a", Name: "hourly", UID: "uid-hourly", Cron: "0 * * * *",
		Type: "sync.hourly.v1", Payload: json.RawMessage(`{"secret": "s3cr3t"}`)})
	logs := e.loggedConsole(t)
	long := strings.Repeat("a", 10_000)
	for path, want := range map[string]int{
		"/schedules/team-a/hour%00ly":                   http.StatusBadRequest,
		"/schedules/team%00-a/hourly":                   http.StatusBadRequest,
		"/schedules/-/%00":                              http.StatusBadRequest,
		"/schedules/team-a/" + long:                     http.StatusBadRequest,
		"/schedules/" + long + "/hourly":                http.StatusBadRequest,
		"/schedules/team-a/hourly..":                    http.StatusBadRequest,
		"/schedules/.../hourly":                         http.StatusBadRequest,
		"/schedules/team-a/...%2F":                      http.StatusBadRequest,
		"/schedules/team-a/..%2F..%2F..%2Fetc%2Fpasswd": http.StatusBadRequest,
		"/schedules/..%2F..%2Fteam-a/hourly":            http.StatusBadRequest,
		"/schedules/Team-A/hourly":                      http.StatusBadRequest,
		"/schedules/team-a/hourly'%3B--":                http.StatusBadRequest,
		"/schedules/team-a/%E2%80%AEhourly":             http.StatusBadRequest,
		"/schedules/team-a/%FF":                         http.StatusBadRequest,
		"/schedules/team-a/nothing":                     http.StatusNotFound,
		"/schedules/team-b/hourly":                      http.StatusNotFound,
		"/schedules/-/hourly":                           http.StatusNotFound,
		"/schedules/team-a/hourly/more":                 http.StatusNotFound,
		"/schedules/team-a/../../../../../etc/passwd":   http.StatusNotFound,
		"/schedules/":                                   http.StatusNotFound,
	} {
		code, body := e.get(t, path)
		if code != want {
			t.Errorf("%.80s: status %d, want %d", path, code, want)
		}
		if strings.Contains(body, "s3cr3t") || strings.Contains(body, "sync.hourly.v1") {
			t.Errorf("%.80s shows the schedule", path)
		}
		if strings.Contains(body, long) {
			t.Errorf("%.80s: the page repeats the 10,000 characters", path)
		}
	}
	if code, _ := e.get(t, "/schedules/team-a/hourly"); code != http.StatusOK {
		t.Fatalf("the schedule's own page: %d", code)
	}
	if !strings.Contains(logs.String(), "Serving the console") {
		t.Fatalf("the console's log was not captured:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("hostile paths wrote errors to the log:\n%s", logs.String())
	}
}

// Against a real API server: a viewer of one namespace sees that
// namespace's schedules (also one whose namespace has no run yet), not a
// bystander namespace's nor the SQL schedules, whose pages are 404 to it
// like a schedule that does not exist; a token with no binding sees none;
// the inbox-wide permission sees them all.
func TestSchedulesPagesAuthorizeThroughKubernetes(t *testing.T) {
	t.Parallel()
	a := setupAuth(t, time.Minute)
	for _, ns := range []string{"team-a", "team-b", "team-c"} {
		a.namespace(t, ns)
	}
	_, err := a.kube.RbacV1().ClusterRoles().Create(a.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "simple-workflow-view"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"workflow.simpleworkflow.dev"}, Resources: []string{"workflowruns"}, Verbs: []string{"get", "list", "watch"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.kube.RbacV1().ClusterRoles().Create(a.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "simple-workflow-console-inbox-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"workflow.simpleworkflow.dev"}, Resources: []string{"inbox"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alice := a.serviceAccount(t, "team-a", "alice")
	nobody := a.serviceAccount(t, "team-a", "nobody")
	ops := a.serviceAccount(t, "team-b", "ops")
	for _, ns := range []string{"team-a", "team-c"} {
		if _, err := a.kube.RbacV1().RoleBindings(ns).Create(a.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-view"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "simple-workflow-view"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "alice", Namespace: "team-a"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.kube.RbacV1().ClusterRoleBindings().Create(a.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ops-inbox"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "simple-workflow-console-inbox-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "ops", Namespace: "team-b"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	schedA := a.putSchedule(t, engine.ScheduleSpec{Namespace: "team-a", Name: "sync", UID: "uid-a", Cron: "* * * * *", Type: "teama.sync.v1"})
	schedB := a.putSchedule(t, engine.ScheduleSpec{Namespace: "team-b", Name: "sync", UID: "uid-b", Cron: "* * * * *", Type: "teamb.sync.v1"})
	schedSQL := a.putSchedule(t, engine.ScheduleSpec{Name: "sql-cleanup", Cron: "* * * * *", Type: "plainsql.cleanup.v1"})
	// team-c has a schedule that has not fired: no run, no worker pool.
	a.putSchedule(t, engine.ScheduleSpec{Namespace: "team-c", Name: "quiet", UID: "uid-c", Cron: "0 0 1 1 *", Type: "teamc.quiet.v1"})
	fired := a.tick(t)
	runA, runB, runSQL := fired[schedA.ID].RunID, fired[schedB.ID].RunID, fired[schedSQL.ID].RunID
	if runA == "" || runB == "" || runSQL == "" {
		t.Fatalf("fired %+v", fired)
	}

	// alice: team-a's and team-c's schedules, nothing of team-b's or SQL's.
	code, body := a.as(t, alice, "/schedules")
	if code != http.StatusOK {
		t.Fatalf("alice's schedules: %d", code)
	}
	mustContain(t, "alice's schedules", body, `href="/schedules/team-a/sync"`, `href="/schedules/team-c/quiet"`)
	for _, hidden := range []string{"team-b", "teamb.", "sql-cleanup", "plainsql"} {
		if strings.Contains(body, hidden) {
			t.Fatalf("alice's schedules show %q:\n%s", hidden, body)
		}
	}
	code, body = a.as(t, alice, "/schedules/team-a/sync")
	if code != http.StatusOK || !strings.Contains(body, `href="/runs/`+runA+`"`) {
		t.Fatalf("alice's schedule page: %d\n%s", code, body)
	}
	if code, _ := a.as(t, alice, "/runs/"+runA); code != http.StatusOK {
		t.Fatalf("alice on her schedule's run: %d", code)
	}
	if code, _ := a.as(t, alice, "/schedules/team-c/quiet"); code != http.StatusOK {
		t.Fatalf("alice on team-c's schedule: %d", code)
	}
	// Another namespace's schedule and a SQL schedule answer as one that
	// does not exist.
	_, missing := a.as(t, alice, "/schedules/team-b/nothing")
	missing = strings.ReplaceAll(missing, "team-b/nothing", "LABEL")
	for _, c := range []struct {
		path, label string
		hidden      []string
	}{
		{"/schedules/team-b/sync", "team-b/sync", []string{runB, "teamb.sync.v1", "* * * * *"}},
		{"/schedules/-/sql-cleanup", "sql-cleanup", []string{runSQL, "plainsql.cleanup.v1", "* * * * *"}},
		{"/schedules/-/no-such-schedule", "no-such-schedule", nil},
	} {
		code, body := a.as(t, alice, c.path)
		if code != http.StatusNotFound {
			t.Fatalf("alice on %s: %d", c.path, code)
		}
		for _, h := range c.hidden {
			if strings.Contains(body, h) {
				t.Fatalf("alice's 404 for %s shows %q", c.path, h)
			}
		}
		if got := strings.ReplaceAll(body, c.label, "LABEL"); got != missing {
			t.Fatalf("alice's 404 for %s differs from the one for a schedule that does not exist:\n%s\n%s", c.path, got, missing)
		}
	}

	// A token with no binding: no schedule.
	code, body = a.as(t, nobody, "/schedules")
	if code != http.StatusOK || !strings.Contains(body, `id="no-schedules"`) {
		t.Fatalf("nobody's schedules: %d\n%s", code, body)
	}
	if code, _ := a.as(t, nobody, "/schedules/team-a/sync"); code != http.StatusNotFound {
		t.Fatalf("nobody on team-a's schedule: %d", code)
	}

	// The inbox-wide permission: every schedule, the SQL one too.
	_, body = a.as(t, ops, "/schedules")
	mustContain(t, "ops's schedules", body, `href="/schedules/team-a/sync"`, `href="/schedules/team-b/sync"`,
		`href="/schedules/team-c/quiet"`, `href="/schedules/-/sql-cleanup"`)
	code, body = a.as(t, ops, "/schedules/-/sql-cleanup")
	if code != http.StatusOK || !strings.Contains(body, `href="/runs/`+runSQL+`"`) {
		t.Fatalf("ops on the SQL schedule: %d", code)
	}
	if code, _ := a.as(t, "", "/schedules"); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
}
