package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/simple-workflow/simple-workflow/internal/console"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// lateActor writes with an engine set once the test's database exists.
type lateActor struct{ eng *engine.Engine }

func (a *lateActor) Engine(context.Context, string) (*engine.Engine, error) { return a.eng, nil }

// editor binds a ServiceAccount to what `kubectl workflow cancel` needs in
// namespace ns: patch (and read) WorkflowRuns.
func (a *authEnv) editor(t *testing.T, ns, name string) string {
	t.Helper()
	token := a.serviceAccount(t, ns, name)
	if _, err := a.kube.RbacV1().Roles(ns).Create(a.ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name + "-edit"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"workflow.simpleworkflow.dev"}, Resources: []string{"workflowruns"},
			Verbs: []string{"get", "list", "watch", "patch"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.kube.RbacV1().RoleBindings(ns).Create(a.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name + "-edit"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return token
}

// login logs in on the console's page with token and returns the cookie.
func (a *authEnv) login(t *testing.T, token string) string {
	t.Helper()
	code, header, _ := a.postForm(t, "", "", a.base, "/login", url.Values{"token": {token}, "next": {"/"}})
	if code != http.StatusSeeOther {
		t.Fatalf("login: %d", code)
	}
	return strings.Split(header.Get("Set-Cookie"), ";")[0]
}

// setupActions is setupAuth with the console acting through its engine,
// and the namespaces team-a and team-b.
func setupActions(t *testing.T) *authEnv {
	t.Helper()
	actor := &lateActor{}
	a := setupAuth(t, 2*time.Second, func(c *console.Config) { c.Actor = actor })
	actor.eng = a.eng
	a.namespace(t, "team-a")
	a.namespace(t, "team-b")
	return a
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// post sends a form as a browser on the console's page would (cookie,
// Origin) or as a script (bearer token), and returns the status, the
// redirect's target and the body.
func (e *env) post(t *testing.T, cookie, bearer, origin, path string, form url.Values) (int, string, string) {
	t.Helper()
	code, header, body := e.postForm(t, cookie, bearer, origin, path, form)
	return code, header.Get("Location"), body
}

// postForm is post, returning the response's header.
func (e *env) postForm(t *testing.T, cookie, bearer, origin, path string, form url.Values) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(e.ctx, http.MethodPost, e.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// page fetches a path with a cookie.
func (a *authEnv) page(t *testing.T, cookie, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(a.ctx, http.MethodGet, a.base+path, nil)
	req.Header.Set("Cookie", cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrfOn returns the form token a page carries.
func csrfOn(t *testing.T, body string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no form token on the page:\n%s", body)
	}
	return m[1]
}

// lastBy returns the "by" of a run's latest event of a type.
func (a *authEnv) lastBy(t *testing.T, id, typ string) string {
	t.Helper()
	evs, err := a.eng.ListEvents(a.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	by := ""
	for _, e := range evs {
		if string(e.Type) == typ {
			var d struct {
				By string `json:"by"`
			}
			_ = json.Unmarshal(e.Data, &d)
			by = d.By
		}
	}
	return by
}

func (a *authEnv) status(t *testing.T, id string) engine.Status {
	t.Helper()
	r, err := a.eng.GetRun(a.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

// Actions on one run, against a real API server: a user allowed to patch
// WorkflowRuns in the run's namespace cancels, retries, approves a run
// parked on a signal and sends a signal from the console's forms, each
// recorded with the user the API server verified; a reader of the
// namespace, a user of another namespace, a form without the user's
// token, from another site or with another user's token, bad JSON and an
// unauthenticated console are all refused, and nothing changes.
func TestConsoleActionsOnOneRun(t *testing.T) {
	t.Parallel()
	a := setupActions(t)
	alice, _ := a.viewers(t) // reads team-a
	bob := a.editor(t, "team-a", "bob")
	const bobName = "console: system:serviceaccount:team-a:bob"

	pending := a.create(t, engine.CreateParams{Type: "act.job.v1", Namespace: "team-a"})
	other := a.create(t, engine.CreateParams{Type: "act.job.v1", Namespace: "team-b"})
	failed := a.create(t, engine.CreateParams{Type: "act.fail.v1", Namespace: "team-a", MaxAttempts: 1})
	parked := a.create(t, engine.CreateParams{Type: "act.wait.v1", Namespace: "team-a"})
	for _, c := range a.claim(t, "act.fail.", 1) {
		a.fail(t, c, "it broke")
	}
	for _, c := range a.claim(t, "act.wait.", 1) {
		res, err := a.eng.ParkRun(a.ctx, engine.ParkParams{LeaseRef: c.Ref(), WorkerID: "test-worker",
			Kind: engine.StepKindSignal, Step: "approval", Position: 0, Signal: "approve"})
		if err != nil || res.Status != engine.WriteParked {
			t.Fatalf("park: %+v %v", res, err)
		}
	}

	bobCookie := a.login(t, bob)
	code, body := a.page(t, bobCookie, "/runs/"+pending)
	if code != http.StatusOK || !strings.Contains(body, `id="cancel"`) || strings.Contains(body, `id="retry"`) {
		t.Fatalf("bob's page of a pending run: %d, cancel %v", code, strings.Contains(body, `id="cancel"`))
	}
	bobCSRF := csrfOn(t, body)
	aliceCookie := a.login(t, alice)
	_, body = a.page(t, aliceCookie, "/runs/"+pending)
	if strings.Contains(body, `id="cancel"`) || !strings.Contains(body, "needs patch on workflowruns.workflow.simpleworkflow.dev in namespace team-a") {
		t.Fatal("alice, a reader, is offered the actions, or not told why not")
	}
	aliceCSRF := console.CSRFOf(alice) // her forms' token, would she have any

	// Refused: no token in the form, another site, another user's token,
	// a reader, a run of a namespace bob does not read.
	for name, try := range map[string]func() int{
		"no form token": func() int {
			c, _, _ := a.post(t, bobCookie, "", a.base, "/runs/"+pending+"/cancel", url.Values{})
			return c
		},
		"another site": func() int {
			c, _, _ := a.post(t, bobCookie, "", "http://evil.example", "/runs/"+pending+"/cancel", url.Values{"csrf": {bobCSRF}})
			return c
		},
		"no origin": func() int {
			c, _, _ := a.post(t, bobCookie, "", "", "/runs/"+pending+"/cancel", url.Values{"csrf": {bobCSRF}})
			return c
		},
		"alice's token in bob's form": func() int {
			c, _, _ := a.post(t, bobCookie, "", a.base, "/runs/"+pending+"/cancel", url.Values{"csrf": {aliceCSRF}})
			return c
		},
		"alice, a reader": func() int {
			c, _, _ := a.post(t, aliceCookie, "", a.base, "/runs/"+pending+"/cancel", url.Values{"csrf": {aliceCSRF}})
			return c
		},
		"alice by header": func() int {
			c, _, _ := a.post(t, "", alice, "", "/runs/"+pending+"/cancel", url.Values{})
			return c
		},
		"bob by header from another site": func() int {
			c, _, _ := a.post(t, "", bob, "http://evil.example", "/runs/"+pending+"/cancel", url.Values{})
			return c
		},
	} {
		if c := try(); c != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, c)
		}
	}
	if c, _, _ := a.post(t, bobCookie, "", a.base, "/runs/"+other+"/cancel", url.Values{"csrf": {bobCSRF}}); c != http.StatusNotFound {
		t.Errorf("bob on team-b's run: %d, want 404", c)
	}
	if c, _, _ := a.post(t, "", "", "", "/runs/"+pending+"/cancel", url.Values{}); c != http.StatusUnauthorized {
		t.Errorf("no token at all: %d, want 401", c)
	}
	if s := a.status(t, pending); s != engine.StatusPending {
		t.Fatalf("after the refused attempts the run is %s", s)
	}
	if s := a.status(t, other); s != engine.StatusPending {
		t.Fatalf("team-b's run is %s", s)
	}

	// Bob cancels, retries, approves and signals.
	code, loc, _ := a.post(t, bobCookie, "", a.base, "/runs/"+pending+"/cancel", url.Values{"csrf": {bobCSRF}})
	if code != http.StatusSeeOther || loc != "/runs/"+pending+"?done=cancelled" || a.status(t, pending) != engine.StatusCancelled {
		t.Fatalf("bob's cancel: %d %q, run %s", code, loc, a.status(t, pending))
	}
	if by := a.lastBy(t, pending, "cancelled"); by != bobName {
		t.Fatalf("the cancel's trail names %q, want %q", by, bobName)
	}
	_, body = a.page(t, bobCookie, loc)
	mustContain(t, "the page after the cancel", body, `id="action-done">Cancelled.`, `id="retry"`)
	if code, loc, _ = a.post(t, bobCookie, "", a.base, "/runs/"+pending+"/cancel", url.Values{"csrf": {bobCSRF}}); !strings.HasSuffix(loc, "done=not-cancelled") {
		t.Fatalf("cancelling again: %d %q", code, loc)
	}

	code, loc, _ = a.post(t, "", bob, "", "/runs/"+failed+"/retry", url.Values{})
	if code != http.StatusSeeOther || a.status(t, failed) != engine.StatusPending || a.lastBy(t, failed, "retried") != bobName {
		t.Fatalf("bob's retry by header: %d %q, run %s, by %q", code, loc, a.status(t, failed), a.lastBy(t, failed, "retried"))
	}
	if code, _, body := a.post(t, "", bob, "", "/runs/"+failed+"/retry", url.Values{}); code != http.StatusConflict || !strings.Contains(body, "cannot be retried") {
		t.Fatalf("retrying a pending run: %d", code)
	}

	_, body = a.page(t, bobCookie, "/runs/"+parked)
	mustContain(t, "a parked run's page", body, `id="approve"`, `Waiting for signal <code>approve</code>`, `name="name" value="approve"`)
	for _, bad := range []url.Values{
		{"name": {"approve"}, "payload": {`{"approved": tru`}},
		{"name": {"<script>"}, "payload": {`{}`}},
		{"name": {"approve"}, "payload": {`{"v":"` + strings.Repeat("x", 270<<10) + `"}`}},
	} {
		bad.Set("csrf", bobCSRF)
		if code, _, _ := a.post(t, bobCookie, "", a.base, "/runs/"+parked+"/signal", bad); code != http.StatusBadRequest && code != http.StatusForbidden {
			t.Errorf("a bad signal (%s...): %d", bad.Encode()[:40], code)
		}
	}
	if sigs, err := a.eng.ListSignals(a.ctx, parked); err != nil || len(sigs) != 0 {
		t.Fatalf("bad signals stored: %v %v", sigs, err)
	}
	code, loc, _ = a.post(t, bobCookie, "", a.base, "/runs/"+parked+"/signal",
		url.Values{"csrf": {bobCSRF}, "name": {"approve"}, "payload": {`{"approved": true, "note": "<b>ok</b>"}`}, "key": {"k1"}})
	if code != http.StatusSeeOther || !strings.HasSuffix(loc, "done=signalled") || a.lastBy(t, parked, "signal_received") != bobName {
		t.Fatalf("bob's approval: %d %q, by %q", code, loc, a.lastBy(t, parked, "signal_received"))
	}
	run, err := a.eng.GetRun(a.ctx, parked)
	if err != nil || run.Wait != nil {
		t.Fatalf("the approved run still waits: %+v %v", run.Wait, err)
	}
	if _, loc, _ = a.post(t, bobCookie, "", a.base, "/runs/"+parked+"/signal",
		url.Values{"csrf": {bobCSRF}, "name": {"approve"}, "payload": {`{}`}, "key": {"k1"}}); !strings.HasSuffix(loc, "done=signal-repeated") {
		t.Fatalf("the same key again: %q", loc)
	}
	// The approval form answers its wait alone: sent again (a second click,
	// a page left open), it is refused and sends nothing.
	if code, _, body := a.post(t, bobCookie, "", a.base, "/runs/"+parked+"/signal",
		url.Values{"csrf": {bobCSRF}, "name": {"approve"}, "step": {"approval"}, "payload": {`{"approved": true}`}}); code != http.StatusConflict ||
		!strings.Contains(body, "no longer waits for approve at step approval") {
		t.Fatalf("a stale approval: %d", code)
	}
	if sigs, err := a.eng.ListSignals(a.ctx, parked); err != nil || len(sigs) != 1 {
		t.Fatalf("signals after the stale approval: %d %v", len(sigs), err)
	}
	// A WorkflowRun's run is retried on its object, which keeps count.
	mirrored := a.create(t, engine.CreateParams{Type: "act.mirror.v1", MaxAttempts: 1,
		Source: &engine.Source{Namespace: "team-a", Name: "order-7", UID: "uid-7"}})
	for _, c := range a.claim(t, "act.mirror.", 1) {
		a.fail(t, c, "mirror broke")
	}
	_, body = a.page(t, bobCookie, "/runs/"+mirrored)
	mustContain(t, "a failed WorkflowRun's run", body, `id="retry-with"`, "kubectl workflow retry order-7 -n team-a")
	if code, _, body := a.post(t, "", bob, "", "/runs/"+mirrored+"/retry", url.Values{}); code != http.StatusConflict ||
		!strings.Contains(body, "kubectl workflow retry order-7 -n team-a") || a.status(t, mirrored) != engine.StatusFailed {
		t.Fatalf("retrying a WorkflowRun's run: %d, run %s", code, a.status(t, mirrored))
	}
	if code, _, _ := a.post(t, bobCookie, "", a.base, "/runs/"+parked+"/explode", url.Values{"csrf": {bobCSRF}}); code != http.StatusMethodNotAllowed {
		t.Fatalf("an unknown action: %d", code)
	}
	if code, _, _ := a.post(t, bobCookie, "", a.base, "/runs/"+parked+"/signal",
		url.Values{"csrf": {bobCSRF}, "payload": {strings.Repeat("x", 400<<10)}}); code != http.StatusForbidden {
		t.Fatalf("a form over 300 KiB: %d", code)
	}
}

// Without Kubernetes authentication the console makes no action: there
// is no one to record.
func TestUnauthenticatedConsoleMakesNoAction(t *testing.T) {
	t.Parallel()
	actor := &lateActor{}
	e := setupWith(t, func(c *console.Config) { c.Actor = actor })
	actor.eng = e.eng
	id := e.create(t, engine.CreateParams{Type: "open.job.v1"})
	if code, _, _ := e.post(t, "", "", e.base, "/runs/"+id+"/cancel", url.Values{}); code != http.StatusForbidden {
		t.Fatalf("cancel on an unauthenticated console: %d", code)
	}
	if r, err := e.eng.GetRun(e.ctx, id); err != nil || r.Status != engine.StatusPending {
		t.Fatalf("run %s %v", r.Status, err)
	}
	if _, body := e.get(t, "/runs/"+id); strings.Contains(body, `id="cancel"`) {
		t.Fatal("an unauthenticated console offers actions")
	}
}

// Bulk actions: a user who reads the whole inbox but may act in team-a
// only is asked to confirm a count, acts on team-a's matching runs alone
// (team-b's bystanders untouched), is refused a stale count and a filter
// matching more than 1,000 runs, and each run's trail names the user.
func TestConsoleBulkActions(t *testing.T) {
	t.Parallel()
	a := setupActions(t)
	_, _ = a.viewers(t)
	carol := a.editor(t, "team-a", "carol")
	if _, err := a.kube.RbacV1().ClusterRoleBindings().Create(a.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "carol-inbox"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "simple-workflow-console-inbox-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "carol", Namespace: "team-a"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var mine, theirs []string
	for range 5 {
		mine = append(mine, a.create(t, engine.CreateParams{Type: "bulk.job.v1", Namespace: "team-a"}))
	}
	for range 2 {
		theirs = append(theirs, a.create(t, engine.CreateParams{Type: "bulk.job.v1", Namespace: "team-b"}))
	}
	cookie := a.login(t, carol)
	_, body := a.page(t, cookie, "/runs?status=pending&prefix=bulk.")
	mustContain(t, "the runs page", body, `id="bulk-link"`, "Cancel every run that matches")
	code, body := a.page(t, cookie, "/runs/bulk?action=cancel&status=pending&prefix=bulk.")
	if code != http.StatusOK {
		t.Fatalf("bulk page: %d", code)
	}
	mustContain(t, "the bulk page", body, "Cancel 5 run(s)", `id="bulk-refused">2 more match`)
	csrf := csrfOn(t, body)
	form := url.Values{"csrf": {csrf}, "action": {"cancel"}, "status": {"pending"}, "prefix": {"bulk."}, "expect": {"4"}}
	if code, _, body := a.post(t, cookie, "", a.base, "/runs/bulk", form); code != http.StatusConflict || !strings.Contains(body, "bulk-changed") {
		t.Fatalf("a stale count: %d", code)
	}
	for _, id := range append(append([]string{}, mine...), theirs...) {
		if s := a.status(t, id); s != engine.StatusPending {
			t.Fatalf("after a refused bulk action run %s is %s", id, s)
		}
	}
	form.Set("expect", "5")
	form.Set("action", "retry")
	if code, _, _ := a.post(t, cookie, "", a.base, "/runs/bulk", form); code != http.StatusBadRequest {
		t.Fatalf("retry of pending runs: %d", code)
	}
	form.Set("action", "cancel")
	delete(form, "csrf")
	if code, _, _ := a.post(t, cookie, "", a.base, "/runs/bulk", form); code != http.StatusForbidden {
		t.Fatalf("a bulk form without its token: %d", code)
	}
	form.Set("csrf", csrf)
	code, _, body = a.post(t, cookie, "", a.base, "/runs/bulk", form)
	if code != http.StatusOK || !strings.Contains(body, "Cancelled 5 run(s).") {
		t.Fatalf("bulk cancel: %d\n%s", code, body)
	}
	for _, id := range mine {
		if s, by := a.status(t, id), a.lastBy(t, id, "cancelled"); s != engine.StatusCancelled || by != "console: system:serviceaccount:team-a:carol" {
			t.Fatalf("run %s: %s by %q", id, s, by)
		}
	}
	for _, id := range theirs {
		if s := a.status(t, id); s != engine.StatusPending {
			t.Fatalf("team-b's bystander %s is %s", id, s)
		}
	}
	// Retry them back in bulk.
	code, _, body = a.post(t, cookie, "", a.base, "/runs/bulk", url.Values{"csrf": {csrf}, "action": {"retry"},
		"status": {"cancelled"}, "prefix": {"bulk."}, "expect": {"5"}})
	if code != http.StatusOK || !strings.Contains(body, "Retried 5 run(s).") {
		t.Fatalf("bulk retry: %d", code)
	}

	// Over the bound: refused whole.
	many := make([]engine.CreateParams, 1001)
	for i := range many {
		many[i] = engine.CreateParams{Type: "many.job.v1", Namespace: "team-a"}
	}
	if _, err := a.eng.CreateRuns(a.ctx, many); err != nil {
		t.Fatal(err)
	}
	_, body = a.page(t, cookie, "/runs/bulk?action=cancel&status=pending&prefix=many.")
	mustContain(t, "the bulk page over the bound", body, `id="bulk-over"`)
	if code, _, _ := a.post(t, cookie, "", a.base, "/runs/bulk", url.Values{"csrf": {csrf}, "action": {"cancel"},
		"status": {"pending"}, "prefix": {"many."}, "expect": {"1000"}}); code != http.StatusConflict {
		t.Fatalf("a bulk cancel over the bound: %d", code)
	}
	var left int
	if err := a.owner.QueryRow(a.ctx, `select count(*) from workflow.workflow_run where type = 'many.job.v1' and status = 'pending'`).Scan(&left); err != nil || left != 1001 {
		t.Fatalf("%d of 1001 left pending (%v)", left, err)
	}
}

// Every value an action takes, hostile (deeply nested, oversized, NUL,
// malformed), is refused whole with nothing written, and an editor of
// team-a reaches none of team-b's runs through any of them (a bulk filter
// naming team-b included): team-b's runs, beside, stay as they were.
func TestConsoleActionsRefuseHostileValuesBesideAnotherNamespace(t *testing.T) {
	t.Parallel()
	a := setupActions(t)
	bob := a.editor(t, "team-a", "bob")
	mine := a.create(t, engine.CreateParams{Type: "hostile.job.v1", Namespace: "team-a"})
	var theirs []string
	for range 3 {
		theirs = append(theirs, a.create(t, engine.CreateParams{Type: "hostile.job.v1", Namespace: "team-b"}))
	}
	cookie := a.login(t, bob)
	_, body := a.page(t, cookie, "/runs/"+mine)
	csrf := csrfOn(t, body)
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	for name, form := range map[string]url.Values{
		"a payload nested 5,000 deep": {"name": {"approve"}, "payload": {`{"v":` + deep + `}`}},
		"a payload with NUL":          {"name": {"approve"}, "payload": {`{"v":"a\u0000b"}`}},
		"a payload of 260 KiB":        {"name": {"approve"}, "payload": {`{"v":"` + strings.Repeat("x", 260<<10) + `"}`}},
		"a key of 600 characters":     {"name": {"approve"}, "key": {strings.Repeat("k", 600)}},
		"a name of 200 characters":    {"name": {strings.Repeat("n", 200)}},
		"a name with NUL":             {"name": {"ap\x00prove"}},
		"a step it does not wait on":  {"name": {"approve"}, "step": {"../../x"}},
	} {
		form.Set("csrf", csrf)
		if code, _, _ := a.post(t, cookie, "", a.base, "/runs/"+mine+"/signal", form); code < 400 || code >= 500 {
			t.Errorf("%s: %d, want a refusal", name, code)
		}
	}
	for name, form := range map[string]url.Values{
		"team-b's runs by namespace":   {"action": {"cancel"}, "status": {"pending"}, "namespace": {"team-b"}, "expect": {"3"}},
		"every run of the type":        {"action": {"cancel"}, "status": {"pending"}, "prefix": {"hostile."}, "expect": {"4"}},
		"a prefix of 5,000 characters": {"action": {"cancel"}, "status": {"pending"}, "prefix": {strings.Repeat("a", 5000)}, "expect": {"0"}},
		"a status that is SQL":         {"action": {"cancel"}, "status": {"pending'; delete from workflow.workflow_run; --"}, "expect": {"0"}},
		"a count past any int":         {"action": {"cancel"}, "status": {"pending"}, "prefix": {"hostile."}, "expect": {"99999999999999999999999"}},
		"an action that is none":       {"action": {"delete"}, "status": {"pending"}, "expect": {"0"}},
	} {
		form.Set("csrf", csrf)
		if code, _, body := a.post(t, cookie, "", a.base, "/runs/bulk", form); code == http.StatusOK && strings.Contains(body, "bulk-done") {
			t.Errorf("%s: made (%d)", name, code)
		}
	}
	if sigs, err := a.eng.ListSignals(a.ctx, mine); err != nil || len(sigs) != 0 {
		t.Fatalf("signals on team-a's run after the refused forms: %d %v", len(sigs), err)
	}
	if s := a.status(t, mine); s != engine.StatusPending {
		t.Fatalf("team-a's run is %s", s)
	}
	for _, id := range theirs {
		if s, by := a.status(t, id), a.lastBy(t, id, "cancelled"); s != engine.StatusPending || by != "" {
			t.Fatalf("team-b's run %s: %s, cancelled by %q", id, s, by)
		}
		if code, _, _ := a.post(t, cookie, "", a.base, "/runs/"+id+"/signal",
			url.Values{"csrf": {csrf}, "name": {"approve"}, "payload": {`{}`}}); code != http.StatusNotFound {
			t.Fatalf("bob signalling team-b's run: %d, want 404", code)
		}
	}
	// The one count that matches team-a alone is made, and only there.
	code, _, body := a.post(t, cookie, "", a.base, "/runs/bulk", url.Values{"csrf": {csrf}, "action": {"cancel"},
		"status": {"pending"}, "prefix": {"hostile."}, "expect": {"1"}})
	if code != http.StatusOK || !strings.Contains(body, "Cancelled 1 run(s).") || a.status(t, mine) != engine.StatusCancelled {
		t.Fatalf("bob's bulk cancel of his own run: %d", code)
	}
	for _, id := range theirs {
		if s := a.status(t, id); s != engine.StatusPending {
			t.Fatalf("team-b's run %s is %s after bob's bulk cancel", id, s)
		}
	}
}
