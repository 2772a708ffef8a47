package console_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/simple-workflow/simple-workflow/internal/console"
	"github.com/simple-workflow/simple-workflow/internal/devenv"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// authEnv is a console checking tokens against a real API server.
type authEnv struct {
	*env
	kube kubernetes.Interface
}

func setupAuth(t *testing.T, ttl time.Duration, with ...func(*console.Config)) *authEnv {
	t.Helper()
	cp, err := devenv.StartControlPlane(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	kube, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	e := setup(t)
	cfg := console.Config{DB: e.reader, Auth: console.KubeReviewer{Client: kube}, AuthTTL: ttl}
	for _, w := range with {
		w(&cfg)
	}
	srv, err := console.New(cfg)
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
	e2 := *e
	e2.console, e2.base = srv, "http://"+l.Addr().String()
	return &authEnv{env: &e2, kube: kube}
}

// serviceAccount creates a ServiceAccount and returns a token of it.
func (a *authEnv) serviceAccount(t *testing.T, ns, name string) string {
	t.Helper()
	if _, err := a.kube.CoreV1().ServiceAccounts(ns).Create(a.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceAccount %s/%s: %v", ns, name, err)
	}
	tr, err := a.kube.CoreV1().ServiceAccounts(ns).CreateToken(a.ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}

// viewers makes the chart's view role and the inbox-wide one, and two
// ServiceAccounts with a token each: alice (team-a), who may read team-a's
// WorkflowRuns, and ops (team-b), who has the inbox-wide permission. The
// namespaces team-a and team-b must exist.
func (a *authEnv) viewers(t *testing.T) (alice, ops string) {
	t.Helper()
	mustCreate := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// What the chart's view role adds to Kubernetes' view (no
	// kube-controller-manager runs here to aggregate it).
	_, err := a.kube.RbacV1().ClusterRoles().Create(a.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "simple-workflow-view"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"workflow.simpleworkflow.dev"}, Resources: []string{"workflowruns"}, Verbs: []string{"get", "list", "watch"}}}}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = a.kube.RbacV1().ClusterRoles().Create(a.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "simple-workflow-console-inbox-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"workflow.simpleworkflow.dev"}, Resources: []string{"inbox"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
	mustCreate(err)
	alice = a.serviceAccount(t, "team-a", "alice")
	ops = a.serviceAccount(t, "team-b", "ops")
	_, err = a.kube.RbacV1().RoleBindings("team-a").Create(a.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-view"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "simple-workflow-view"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "alice", Namespace: "team-a"}}}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = a.kube.RbacV1().ClusterRoleBindings().Create(a.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ops-inbox"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "simple-workflow-console-inbox-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "ops", Namespace: "team-b"}}}, metav1.CreateOptions{})
	mustCreate(err)
	return alice, ops
}

func (a *authEnv) namespace(t *testing.T, name string) {
	t.Helper()
	if _, err := a.kube.CoreV1().Namespaces().Create(a.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// as fetches a path with a bearer token ("" for none) and returns the
// status and body.
func (a *authEnv) as(t *testing.T, token, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(a.ctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// The console's trust model, against a real API server: a user bound to the
// WorkflowRun view role in one namespace sees that namespace only in lists,
// run pages, streams and the overview; a token with no binding sees
// nothing; no token or a bad one is 401; the inbox-wide permission shows
// everything, runs with no Kubernetes source too; a deleted
// ServiceAccount's token stops working within the cache's life, and its
// open stream ends.
func TestConsoleAuthorizesThroughKubernetes(t *testing.T) {
	t.Parallel()
	a := setupAuth(t, 2*time.Second)
	a.namespace(t, "team-a")
	a.namespace(t, "team-b")
	alice, ops := a.viewers(t)
	nobody := a.serviceAccount(t, "team-a", "nobody")

	runA := a.create(t, engine.CreateParams{Type: "teama.job.v1", Payload: []byte(`{"secret":"a-payload"}`),
		Source: &engine.Source{Namespace: "team-a", Name: "ra", UID: "uid-a"}})
	runB := a.create(t, engine.CreateParams{Type: "teamb.job.v1", Payload: []byte(`{"secret":"b-payload"}`),
		Source: &engine.Source{Namespace: "team-b", Name: "rb", UID: "uid-b"}})
	plain := a.create(t, engine.CreateParams{Type: "plainsql.job.v1", Payload: []byte(`{"secret":"sql-payload"}`)})
	// A SQL producer's run of team-a (no Kubernetes source): team-a's.
	sqlA := a.create(t, engine.CreateParams{Type: "teama.sql.v1", Payload: []byte(`{"secret":"a-sql-payload"}`),
		Namespace: "team-a"})

	// No token, a bad one.
	if code, _ := a.as(t, "", "/runs"); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	if code, _ := a.as(t, "", "/live"); code != http.StatusUnauthorized {
		t.Fatalf("no token, stream: %d", code)
	}
	if code, _ := a.as(t, "not-a-token", "/"); code != http.StatusUnauthorized {
		t.Fatalf("a bad token: %d", code)
	}

	// alice reads team-a only, everywhere.
	code, body := a.as(t, alice, "/runs")
	if code != http.StatusOK || !strings.Contains(body, runA) || strings.Contains(body, runB) || strings.Contains(body, plain) {
		t.Fatalf("alice's runs (%d): A %v, B %v, plain %v", code, strings.Contains(body, runA), strings.Contains(body, runB), strings.Contains(body, plain))
	}
	if _, body := a.as(t, alice, "/runs?namespace=team-b"); strings.Contains(body, runB) {
		t.Fatal("alice filtered her way to team-b's run")
	}
	if _, body := a.as(t, alice, "/runs?prefix=teamb."); strings.Contains(body, runB) {
		t.Fatal("alice reached team-b's run by type prefix")
	}
	if code, body := a.as(t, alice, "/runs/"+runA); code != http.StatusOK || !strings.Contains(body, "a-payload") {
		t.Fatalf("alice's own run: %d", code)
	}
	if code, body := a.as(t, alice, "/runs/"+sqlA); code != http.StatusOK || !strings.Contains(body, "a-sql-payload") {
		t.Fatalf("alice on team-a's SQL-produced run: %d", code)
	}
	if _, body := a.as(t, alice, "/runs"); !strings.Contains(body, sqlA) {
		t.Fatal("alice's list lacks team-a's SQL-produced run")
	}
	for _, id := range []string{runB, plain} {
		if code, body := a.as(t, alice, "/runs/"+id); code != http.StatusNotFound || strings.Contains(body, "payload\":") {
			t.Fatalf("alice opened run %s: %d", id, code)
		}
		if code, _ := a.as(t, alice, "/live?run="+id); code != http.StatusNotFound {
			t.Fatalf("alice's stream of run %s: %d", id, code)
		}
	}
	if _, body := a.as(t, alice, "/"); !strings.Contains(body, "teama.job.v1") || strings.Contains(body, "teamb.job.v1") || strings.Contains(body, "plainsql.job.v1") {
		t.Fatalf("alice's overview shows other namespaces' types:\n%s", body)
	}

	// A token with no binding: an empty console, not an error.
	if code, body := a.as(t, nobody, "/runs"); code != http.StatusOK || strings.Contains(body, runA) || strings.Contains(body, runB) {
		t.Fatalf("nobody's runs: %d", code)
	}
	if _, body := a.as(t, nobody, "/"); strings.Contains(body, ".job.v1") {
		t.Fatal("nobody's overview shows types")
	}

	// The inbox-wide permission: everything, the plain SQL run too.
	if _, body := a.as(t, ops, "/runs"); !strings.Contains(body, runA) || !strings.Contains(body, runB) || !strings.Contains(body, plain) {
		t.Fatal("ops does not see the whole inbox")
	}
	if code, body := a.as(t, ops, "/runs/"+plain); code != http.StatusOK || !strings.Contains(body, "sql-payload") {
		t.Fatalf("ops on the plain SQL run: %d", code)
	}

	// The login page keeps the token in an HttpOnly, SameSite=Strict cookie;
	// a post from elsewhere is refused.
	form := url.Values{"token": {alice}, "next": {"/runs"}}
	post := func(origin string) *http.Response {
		req, err := http.NewRequestWithContext(a.ctx, http.MethodPost, a.base+"/login", strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post("http://evil.example"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("login posted from another origin: %d", resp.StatusCode)
	}
	resp := post(a.base)
	cookie := resp.Header.Get("Set-Cookie")
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Fatalf("login: %d, cookie %q", resp.StatusCode, cookie)
	}
	req, _ := http.NewRequestWithContext(a.ctx, http.MethodGet, a.base+"/runs", nil)
	req.Header.Set("Cookie", strings.Split(cookie, ";")[0])
	cresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cbody, _ := io.ReadAll(cresp.Body)
	cresp.Body.Close()
	if cresp.StatusCode != http.StatusOK || !strings.Contains(string(cbody), runA) || strings.Contains(string(cbody), runB) {
		t.Fatalf("with the login cookie: %d", cresp.StatusCode)
	}

	// A stream of alice's, open while her ServiceAccount is deleted, ends;
	// her token stops working within a minute.
	sreq, _ := http.NewRequestWithContext(a.ctx, http.MethodGet, a.base+"/live?run="+runA, nil)
	sreq.Header.Set("Authorization", "Bearer "+alice)
	stream, err := http.DefaultClient.Do(sreq)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("alice's stream: %v %v", stream, err)
	}
	defer stream.Body.Close()
	ended := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stream.Body)
		last := ""
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "event: ") {
				last = sc.Text()
			}
		}
		ended <- last
	}()
	if err := a.kube.CoreV1().ServiceAccounts("team-a").Delete(a.ctx, "alice", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		code, _ := a.as(t, alice, "/runs")
		if code == http.StatusUnauthorized {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's token still works a minute after her ServiceAccount was deleted (%d)", code)
		}
		time.Sleep(200 * time.Millisecond)
	}
	select {
	case last := <-ended:
		if last != "event: unauthorized" {
			t.Fatalf("the stream ended with %q", last)
		}
	case <-time.After(time.Minute):
		t.Fatal("alice's stream still open a minute after her ServiceAccount was deleted")
	}
}

// --console-auth=none: every page says the console is unauthenticated.
func TestUnauthenticatedConsoleSaysSo(t *testing.T) {
	t.Parallel()
	e := setup(t)
	code, body := e.get(t, "/")
	if code != http.StatusOK || !strings.Contains(body, `id="unauthenticated"`) {
		t.Fatalf("overview: %d, banner %v", code, strings.Contains(body, `id="unauthenticated"`))
	}
}

// A console with neither a reviewer nor an explicit "unauthenticated" is
// refused at construction: no console is open by accident.
func TestConsoleRefusesToStartOpenByDefault(t *testing.T) {
	t.Parallel()
	e := setup(t)
	if _, err := console.New(console.Config{DB: e.reader}); err == nil {
		t.Fatal("a console without authentication was made")
	}
}

// A console turned on with the chart's defaults starts even where its
// database role is missing (or not granted): it reads as the login user,
// in read-only transactions, and says so.
func TestConsoleStartsWithoutItsRole(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.owner.Config().ConnString()
	if _, err := console.OpenPool(e.ctx, url, "sw_no_such_role"); !errors.Is(err, console.ErrRole) {
		t.Fatalf("OpenPool with a missing role: %v", err)
	}
	var logs strings.Builder
	pool, err := console.OpenReadPool(e.ctx, url, "sw_no_such_role", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(e.ctx, "create table workflow.console_wrote (x int)"); err == nil {
		t.Fatal("the fallback console could write")
	}
	if !strings.Contains(logs.String(), "reads as the manager's database user") {
		t.Fatalf("no warning: %s", logs.String())
	}
}
