package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/console"
	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

var nextLink = regexp.MustCompile(`id="next" href="([^"]+)"`)

// listedInboxes is an InboxLister whose list a test changes.
type listedInboxes struct {
	mu   sync.Mutex
	list []console.InboxURL
}

func (l *listedInboxes) Inboxes(context.Context) ([]console.InboxURL, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.list), nil
}

func (l *listedInboxes) set(list ...console.InboxURL) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = list
}

// inbox is a second inbox database: its owner's engine.
type inbox struct {
	owner *pgxpool.Pool
	eng   *engine.Engine
	url   string
}

// newInbox makes an inbox database of the shared test server.
func newInbox(t *testing.T, ctx context.Context) inbox {
	t.Helper()
	owner, url := pgtest.NewPool(t)
	return inboxOf(t, ctx, owner, url)
}

func inboxOf(t *testing.T, ctx context.Context, owner *pgxpool.Pool, url string) inbox {
	t.Helper()
	if err := engine.CreateRoles(ctx, owner); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(owner)
	if err != nil {
		t.Fatal(err)
	}
	return inbox{owner: owner, eng: eng, url: url}
}

func (in inbox) create(t *testing.T, ctx context.Context, p engine.CreateParams) string {
	t.Helper()
	res, err := in.eng.CreateRun(ctx, p)
	if err != nil {
		t.Fatalf("create run: %v", err)
	}
	return res.ID
}

// eventually polls cond every 100 ms until it holds, failing after limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The console reads every inbox: the runs list merges them newest first
// across pages (each run once, in the order they were recorded), a run's
// page reads from the run's inbox and names it, the overview sums types
// and lists the inboxes, schedules of each are listed and shown from their
// own inbox, and a notification of another inbox reaches the pages.
func TestConsoleReadsEveryInbox(t *testing.T) {
	t.Parallel()
	listed := &listedInboxes{}
	e := setupWith(t, func(c *console.Config) { c.Inboxes, c.Role = listed, console.DefaultRole })
	b := newInbox(t, e.ctx)
	listed.set(console.InboxURL{Name: "b", URL: b.url})
	e.console.RefreshInboxes(e.ctx)
	eventually(t, 10*time.Second, "the overview lists inbox b as read", func() bool {
		e.console.ForgetOverview()
		_, body := e.get(t, "/")
		return strings.Contains(body, `data-inbox="b"><td>b</td><td><span class="status succeeded">read`)
	})

	// Recorded one after the other, alternating inboxes: the list's order
	// is the reverse of this, over two pages.
	var recorded []string
	inboxOf := map[string]string{}
	for i := range 64 {
		if i%2 == 0 {
			id := e.create(t, engine.CreateParams{Type: "alpha.job.v1",
				Source: &engine.Source{Namespace: "team-a", Name: fmt.Sprintf("a-%d", i), UID: fmt.Sprintf("ua-%d", i)}})
			recorded, inboxOf[id] = append(recorded, id), "default"
		} else {
			id := b.create(t, e.ctx, engine.CreateParams{Type: "beta.job.v1", Payload: json.RawMessage(`{"in":"inbox-b"}`),
				Source: &engine.Source{Namespace: "team-b", Name: fmt.Sprintf("b-%d", i), UID: fmt.Sprintf("ub-%d", i)}})
			recorded, inboxOf[id] = append(recorded, id), "b"
		}
	}
	var shown []string
	path := "/runs"
	for pages := 0; path != ""; pages++ {
		if pages > 3 {
			t.Fatal("the runs list does not end")
		}
		code, body := e.get(t, path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d\n%s", path, code, body)
		}
		for _, m := range runLink.FindAllStringSubmatch(body, -1) {
			shown = append(shown, m[1])
		}
		mustContain(t, "runs page", body, `<th>Inbox</th>`, `<td class="inbox">b</td>`, `<td class="inbox">default</td>`)
		path = ""
		if m := nextLink.FindStringSubmatch(body); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	want := slices.Clone(recorded)
	slices.Reverse(want)
	if !slices.Equal(shown, want) {
		t.Fatalf("the runs of both inboxes, over the pages:\n got %v\nwant %v", shown, want)
	}
	// A filter applies in every inbox.
	_, body := e.get(t, "/runs?namespace=team-b")
	for _, m := range runLink.FindAllStringSubmatch(body, -1) {
		if inboxOf[m[1]] != "b" {
			t.Fatalf("namespace team-b lists run %s of inbox %s", m[1], inboxOf[m[1]])
		}
	}

	// A run's page reads from its inbox, and follows it there.
	bRun := recorded[len(recorded)-1]
	code, body := e.get(t, "/runs/"+bRun)
	if code != http.StatusOK {
		t.Fatalf("run page of inbox b: %d\n%s", code, body)
	}
	mustContain(t, "run page of inbox b", body, `<dd id="inbox">b</dd>`, `inbox-b`, `WorkflowRun team-b/b-63`)
	code, body = e.get(t, "/runs/"+recorded[0])
	if code != http.StatusOK {
		t.Fatalf("run page of the default inbox: %d", code)
	}
	mustContain(t, "run page of the default inbox", body, `<dd id="inbox">default</dd>`, `WorkflowRun team-a/a-0`)
	claimed, err := b.eng.ClaimRuns(e.ctx, engine.ClaimParams{WorkerID: "b-worker", TypePrefixes: []string{"beta."},
		Limit: 1, LeaseDuration: time.Minute, Namespace: "team-b"})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim in inbox b: %v %v", claimed, err)
	}
	if _, err := b.eng.CompleteRuns(e.ctx, "b-worker", []engine.Completion{{LeaseRef: engine.LeaseRef{
		ID: claimed[0].ID, Token: claimed[0].LeaseToken, Attempt: claimed[0].Attempt}, Result: json.RawMessage(`{"done":"in b"}`)}}); err != nil {
		t.Fatal(err)
	}
	_, body = e.get(t, "/runs/"+claimed[0].ID)
	mustContain(t, "finished run of inbox b", body, `class="status succeeded" id="status"`, `<td>b-worker</td>`)

	// The overview: both inboxes' types.
	e.console.ForgetOverview()
	_, body = e.get(t, "/")
	mustContain(t, "overview", body, `data-type="alpha.job.v1"`, `data-type="beta.job.v1"`, `data-inbox="default"`)

	// Schedules of each inbox; a SQL schedule of one name in both is shown
	// from the inbox its link names.
	if _, err := e.eng.PutSchedule(e.ctx, engine.ScheduleSpec{Name: "nightly", Cron: "0 3 * * *", Type: "alpha.nightly.v1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.eng.PutSchedule(e.ctx, engine.ScheduleSpec{Name: "nightly", Cron: "0 4 * * *", Type: "beta.nightly.v1"}); err != nil {
		t.Fatal(err)
	}
	_, body = e.get(t, "/schedules")
	mustContain(t, "schedules", body, `href="/schedules/-/nightly"`, `href="/schedules/-/nightly?inbox=b"`,
		`<code>0 3 * * *</code>`, `<code>0 4 * * *</code>`)
	if _, body := e.get(t, "/schedules/-/nightly?inbox=b"); !strings.Contains(body, "beta.nightly.v1") || strings.Contains(body, "alpha.nightly.v1") {
		t.Fatalf("inbox b's schedule page:\n%s", body)
	}
	if _, body := e.get(t, "/schedules/-/nightly"); !strings.Contains(body, "alpha.nightly.v1") {
		t.Fatalf("the default inbox's schedule page:\n%s", body)
	}
	// A hostile inbox name is only compared: not found, nothing else read.
	for _, hostile := range []string{"nowhere", strings.Repeat("b", 64<<10), "b%00", "%22%3E%3Cscript%3E"} {
		if code, body := e.get(t, "/schedules/-/nightly?inbox="+hostile); code != http.StatusNotFound || strings.Contains(body, "<script>") {
			t.Fatalf("a schedule of inbox %.20q: %d", hostile, code)
		}
	}
	// An inbox whose URL is malformed (its Secret is the cluster admin's)
	// is shown as not read; the others are unharmed.
	listed.set(console.InboxURL{Name: "b", URL: b.url}, console.InboxURL{Name: "broken", URL: "postgres://x:%zz@\x00/"})
	e.console.RefreshInboxes(e.ctx)
	code, body = e.get(t, "/runs?namespace=team-b")
	if code != http.StatusOK || !strings.Contains(body, bRun) {
		t.Fatalf("inbox b's runs beside a malformed inbox: %d", code)
	}
	mustContain(t, "runs beside a malformed inbox", body, `<strong>broken</strong>`)
	listed.set(console.InboxURL{Name: "b", URL: b.url})
	e.console.RefreshInboxes(e.ctx)

	// Inbox b's notifications reach the console.
	eventually(t, 10*time.Second, "the console listens", e.console.Listening)
	// Quiet first (the default inbox's last notifications heard), so that
	// what is heard next is inbox b's.
	eventually(t, 10*time.Second, "the console hears nothing for a second", func() bool {
		return !e.console.HeardSince(time.Now().Add(-time.Second))
	})
	before := time.Now()
	b.create(t, e.ctx, engine.CreateParams{Type: "beta.job.v1", Namespace: "team-b"})
	eventually(t, 10*time.Second, "a run recorded in inbox b is heard", func() bool { return e.console.HeardSince(before) })

	// A statement inbox b refuses (the console's role may no longer list
	// runs there) fails that page's part of b, said on the page, and
	// leaves b in the other pages: b answered.
	if _, err := b.owner.Exec(e.ctx, `revoke execute on function workflow.list_runs_newest(text, text, text, text[],
		timestamptz, timestamptz, timestamptz, uuid, integer) from workflow_reader, public`); err != nil {
		t.Fatal(err)
	}
	code, body = e.get(t, "/runs")
	if code != http.StatusOK || !strings.Contains(body, recorded[0]) || strings.Contains(body, bRun) {
		t.Fatalf("the runs page with inbox b refusing its list (%d)", code)
	}
	mustContain(t, "runs page, b refusing", body, `<strong>b</strong>`)
	if code, _ := e.get(t, "/runs/"+bRun); code != http.StatusOK {
		t.Fatalf("a run page of inbox b after b refused a list: %d", code)
	}
	if _, err := b.owner.Exec(e.ctx, `grant execute on function workflow.list_runs_newest(text, text, text, text[],
		timestamptz, timestamptz, timestamptz, uuid, integer) to workflow_reader`); err != nil {
		t.Fatal(err)
	}

	// Its Secret unreadable for a while (listed without a URL): the
	// console keeps reading it.
	listed.set(console.InboxURL{Name: "b", Err: fmt.Errorf("secrets \"inbox-b\" is forbidden")})
	e.console.RefreshInboxes(e.ctx)
	if code, _ := e.get(t, "/runs/"+bRun); code != http.StatusOK {
		t.Fatalf("a run of inbox b while its Secret cannot be read: %d", code)
	}

	// Inbox b no longer listed: its runs are no longer shown.
	listed.set()
	e.console.RefreshInboxes(e.ctx)
	if code, _ := e.get(t, "/runs/"+bRun); code != http.StatusNotFound {
		t.Fatalf("a run of an inbox no longer listed: %d", code)
	}
	_, body = e.get(t, "/runs")
	if strings.Contains(body, `<th>Inbox</th>`) || strings.Contains(body, bRun) {
		t.Fatal("the runs page still shows inbox b")
	}
}

// An inbox whose database stops answering, refused or frozen, leaves the
// other inboxes' pages as they were, within the console's bound: the pages
// say which inbox they could not read, a run of it answers 503 (not "no
// such run"), and when it answers again its runs are back.
func TestConsoleShowsTheOtherInboxesWhileOneIsDown(t *testing.T) {
	t.Parallel()
	listed := &listedInboxes{}
	e := setupWith(t, func(c *console.Config) { c.Inboxes, c.Role = listed, console.DefaultRole })
	cluster, err := pgtest.StartCluster(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
	owner, err := pgxpool.New(e.ctx, cluster.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(owner.Close)
	if _, err := engine.Migrate(e.ctx, owner); err != nil {
		t.Fatal(err)
	}
	c := inboxOf(t, e.ctx, owner, cluster.URL)
	listed.set(console.InboxURL{Name: "c", URL: c.url})
	e.console.RefreshInboxes(e.ctx)

	home := e.create(t, engine.CreateParams{Type: "alpha.job.v1", Namespace: "team-a"})
	away := c.create(t, e.ctx, engine.CreateParams{Type: "gamma.job.v1", Namespace: "team-c"})
	eventually(t, 10*time.Second, "both inboxes' runs listed", func() bool {
		_, body := e.get(t, "/runs")
		return strings.Contains(body, home) && strings.Contains(body, away)
	})

	check := func(how string) {
		t.Helper()
		start := time.Now()
		code, body := e.get(t, "/runs")
		took := time.Since(start)
		if code != http.StatusOK || !strings.Contains(body, home) || strings.Contains(body, away) {
			t.Fatalf("%s: the runs page (%d) lacks the default inbox's run or shows inbox c's:\n%s", how, code, body)
		}
		mustContain(t, how+": runs page", body, `id="unread"`, `<strong>c</strong>`)
		if took > 8*time.Second {
			t.Fatalf("%s: the runs page took %s", how, took)
		}
		if code, body := e.get(t, "/runs/"+home); code != http.StatusOK {
			t.Fatalf("%s: the default inbox's run: %d\n%s", how, code, body)
		}
		if code, body := e.get(t, "/runs/"+away); code != http.StatusServiceUnavailable || !strings.Contains(body, "could not be read now: c") {
			t.Fatalf("%s: inbox c's run: %d\n%s", how, code, body)
		}
		e.console.ForgetOverview()
		_, body = e.get(t, "/")
		mustContain(t, how+": overview", body, `data-inbox="c"><td>c</td><td><span class="status failed">could not be read`,
			`data-type="alpha.job.v1"`)
	}
	back := func(how string) {
		t.Helper()
		eventually(t, 30*time.Second, how+": inbox c's run shown again", func() bool {
			code, body := e.get(t, "/runs")
			return code == http.StatusOK && strings.Contains(body, away) && !strings.Contains(body, `id="unread"`)
		})
		if code, _ := e.get(t, "/runs/"+away); code != http.StatusOK {
			t.Fatalf("%s: inbox c's run page: %d", how, code)
		}
	}

	// Refused: the server is shut down.
	if err := cluster.Halt(e.ctx); err != nil {
		t.Fatal(err)
	}
	check("shut down")
	if err := cluster.Resume(e.ctx); err != nil {
		t.Fatal(err)
	}
	back("started again")

	// Frozen: every process of the server stopped (connections hang).
	paused := make(chan error, 1)
	go func() { paused <- cluster.Pause(e.ctx, 25*time.Second) }()
	eventually(t, 10*time.Second, "inbox c's server frozen", func() bool {
		select {
		case err := <-paused:
			// pg.sh pause ended before the server was seen frozen: say why.
			t.Fatalf("pausing inbox c's server ended early: %v", err)
		default:
		}
		ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
		defer cancel()
		return owner.Ping(ctx) != nil
	})
	check("frozen")
	if err := <-paused; err != nil {
		t.Fatal(err)
	}
	back("thawed")
}

// Across inboxes the console authorizes as it does in one: a viewer of
// team-a reads team-a's runs in every inbox and none of team-b's (a run
// page of team-b in another inbox is not found, its stream refused), and
// is not told the names of inboxes that could not be read; a viewer with
// the inbox-wide permission reads everything and is told.
func TestConsoleAuthorizesAcrossInboxes(t *testing.T) {
	t.Parallel()
	listed := &listedInboxes{}
	a := setupAuth(t, 30*time.Second, func(c *console.Config) { c.Inboxes, c.Role = listed, console.DefaultRole })
	b := newInbox(t, a.ctx)
	listed.set(console.InboxURL{Name: "b", URL: b.url},
		console.InboxURL{Name: "hidden-inbox", URL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"})
	a.console.RefreshInboxes(a.ctx)
	a.namespace(t, "team-a")
	a.namespace(t, "team-b")
	alice, ops := a.viewers(t)

	homeA := a.create(t, engine.CreateParams{Type: "alpha.job.v1", Namespace: "team-a"})
	awayA := b.create(t, a.ctx, engine.CreateParams{Type: "alpha.job.v1", Namespace: "team-a",
		Payload: json.RawMessage(`{"secret":"a-in-b"}`)})
	awayB := b.create(t, a.ctx, engine.CreateParams{Type: "beta.job.v1", Namespace: "team-b",
		Payload: json.RawMessage(`{"secret":"b-in-b"}`)})

	code, body := a.as(t, alice, "/runs")
	if code != http.StatusOK || !strings.Contains(body, homeA) || !strings.Contains(body, awayA) || strings.Contains(body, awayB) {
		t.Fatalf("alice's runs (%d): home %v, team-a in b %v, team-b in b %v", code,
			strings.Contains(body, homeA), strings.Contains(body, awayA), strings.Contains(body, awayB))
	}
	mustContain(t, "alice's runs", body, "Some runs are not shown")
	if strings.Contains(body, "hidden-inbox") {
		t.Fatal("alice is told the name of an inbox")
	}
	if _, body := a.as(t, alice, "/runs?namespace=team-b"); strings.Contains(body, awayB) {
		t.Fatal("alice filtered her way to team-b's run in inbox b")
	}
	if code, body := a.as(t, alice, "/runs/"+awayA); code != http.StatusOK || !strings.Contains(body, "a-in-b") {
		t.Fatalf("alice on team-a's run in inbox b: %d", code)
	}
	// While an inbox cannot be read, a run found nowhere may be there: the
	// answer to team-b's run is that, as for a run that does not exist.
	code, body = a.as(t, alice, "/runs/"+awayB)
	if code != http.StatusServiceUnavailable || strings.Contains(body, "b-in-b") || strings.Contains(body, "hidden-inbox") {
		t.Fatalf("alice opened team-b's run in inbox b: %d\n%s", code, body)
	}
	made := "0b6c5a6e-8d7e-4f43-9f51-3c1e1f0f7d3a"
	_, other := a.as(t, alice, "/runs/"+made)
	if strings.ReplaceAll(other, made, awayB) != body {
		t.Fatalf("team-b's run and a run that does not exist are told apart:\n%s\n%s", body, other)
	}
	if code, _ := a.as(t, alice, "/live?run="+awayB); code != http.StatusNotFound {
		t.Fatalf("alice's stream of team-b's run in inbox b: %d", code)
	}
	if _, body := a.as(t, alice, "/"); strings.Contains(body, "beta.job.v1") || strings.Contains(body, "hidden-inbox") ||
		strings.Contains(body, `id="inboxes"`) {
		t.Fatalf("alice's overview shows team-b's types or the inboxes:\n%s", body)
	}

	// Schedules likewise: team-b's, in inbox b, and one that does not
	// exist get the same answer.
	if _, err := b.eng.PutSchedule(a.ctx, engine.ScheduleSpec{Namespace: "team-b", Name: "hourly", UID: "uid-hourly",
		Cron: "0 * * * *", Type: "beta.job.v1"}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/schedules/team-b/hourly", "/schedules/team-b/nothing-here", "/schedules/team-b/hourly?inbox=b"} {
		if code, body := a.as(t, alice, path); code != http.StatusNotFound || strings.Contains(body, "hidden-inbox") {
			t.Fatalf("alice on %s: %d", path, code)
		}
	}
	if code, body := a.as(t, ops, "/schedules/team-b/hourly"); code != http.StatusOK || !strings.Contains(body, "beta.job.v1") {
		t.Fatalf("ops on team-b's schedule in inbox b: %d", code)
	}

	// With every inbox answering, team-b's run is not found.
	listed.set(console.InboxURL{Name: "b", URL: b.url})
	a.console.RefreshInboxes(a.ctx)
	if code, body := a.as(t, alice, "/runs/"+awayB); code != http.StatusNotFound || strings.Contains(body, "b-in-b") {
		t.Fatalf("alice opened team-b's run in inbox b: %d", code)
	}
	listed.set(console.InboxURL{Name: "b", URL: b.url},
		console.InboxURL{Name: "hidden-inbox", URL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"})
	a.console.RefreshInboxes(a.ctx)

	code, body = a.as(t, ops, "/runs")
	if code != http.StatusOK || !strings.Contains(body, homeA) || !strings.Contains(body, awayA) || !strings.Contains(body, awayB) {
		t.Fatalf("ops does not read every inbox (%d)", code)
	}
	mustContain(t, "ops's runs", body, `<strong>hidden-inbox</strong>`)
	if code, body := a.as(t, ops, "/runs/"+awayB); code != http.StatusOK || !strings.Contains(body, "b-in-b") {
		t.Fatalf("ops on team-b's run in inbox b: %d", code)
	}
}
