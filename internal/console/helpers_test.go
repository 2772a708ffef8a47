package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/console"
	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// env is a database of a test's own, its engine (as the schema's owner,
// for writing) and a console reading it as workflow_reader, served on a
// real port.
type env struct {
	ctx     context.Context
	owner   *pgxpool.Pool
	eng     *engine.Engine
	reader  *pgxpool.Pool
	console *console.Server
	base    string
}

// staticPools is a PoolLister with fixed pools.
type staticPools []console.WorkerPool

func (p staticPools) WorkerPools(context.Context) ([]console.WorkerPool, error) { return p, nil }

func setup(t *testing.T, pools ...console.WorkerPool) *env {
	t.Helper()
	return setupWith(t, nil, pools...)
}

// setupWith is setup with the console's configuration changed by with
// (nil: as it is).
func setupWith(t *testing.T, with func(*console.Config), pools ...console.WorkerPool) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	owner, url := pgtest.NewPool(t)
	if err := engine.CreateRoles(ctx, owner); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(owner)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := console.OpenPool(ctx, url, console.DefaultRole)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reader.Close)
	cfg := console.Config{DB: reader, Pools: staticPools(pools), Unauthenticated: true}
	if with != nil {
		with(&cfg)
	}
	srv, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.ServeListener(serveCtx, l) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("console: %v", err)
		}
	})
	return &env{ctx: ctx, owner: owner, eng: eng, reader: reader, console: srv, base: "http://" + l.Addr().String()}
}

// get fetches a console path and returns the status and body.
func (e *env) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, http.MethodGet, e.base+path, nil)
	if err != nil {
		t.Fatal(err)
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

// serve times one request of the console's handler, in process.
func (e *env) serve(t *testing.T, path string) (time.Duration, int, string) {
	t.Helper()
	return e.serveHost(t, path, "127.0.0.1:8082")
}

// serveHost is serve with the request's Host header.
func (e *env) serveHost(t *testing.T, path, host string) (time.Duration, int, string) {
	t.Helper()
	req := httptest.NewRequestWithContext(e.ctx, http.MethodGet, path, nil)
	req.Host = host
	rec := httptest.NewRecorder()
	start := time.Now()
	e.console.ServeHTTP(rec, req)
	return time.Since(start), rec.Code, rec.Body.String()
}

func (e *env) create(t *testing.T, p engine.CreateParams) string {
	t.Helper()
	res, err := e.eng.CreateRun(e.ctx, p)
	if err != nil {
		t.Fatalf("create run: %v", err)
	}
	return res.ID
}

// claim claims up to n runs under prefix as worker w, serving in turn
// each namespace whose types have runnable runs (a worker of each team).
func (e *env) claim(t *testing.T, prefix string, n int) []engine.ClaimedRun {
	t.Helper()
	rows, err := e.owner.Query(e.ctx, `select distinct type_namespace::text from workflow.workflow_run
		where status = 'pending' order by 1`)
	if err != nil {
		t.Fatal(err)
	}
	namespaces, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var runs []engine.ClaimedRun
	for _, ns := range namespaces {
		if len(runs) >= n {
			break
		}
		got, err := e.eng.ClaimRuns(e.ctx, engine.ClaimParams{WorkerID: "test-worker", TypePrefixes: []string{prefix},
			Limit: n - len(runs), LeaseDuration: time.Minute, Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, got...)
	}
	return runs
}

func (e *env) complete(t *testing.T, c engine.ClaimedRun, result string) {
	t.Helper()
	if _, err := e.eng.CompleteRuns(e.ctx, "test-worker", []engine.Completion{{
		LeaseRef: engine.LeaseRef{ID: c.ID, Token: c.LeaseToken, Attempt: c.Attempt},
		Result:   json.RawMessage(result)}}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) fail(t *testing.T, c engine.ClaimedRun, msg string) {
	t.Helper()
	if _, err := e.eng.FailRuns(e.ctx, "test-worker", []engine.Failure{{
		LeaseRef: engine.LeaseRef{ID: c.ID, Token: c.LeaseToken, Attempt: c.Attempt}, Error: msg}}); err != nil {
		t.Fatal(err)
	}
}

// mustContain fails unless body holds each of wants.
func mustContain(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, body)
		}
	}
}
