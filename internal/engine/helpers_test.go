package engine_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// bundle is what most tests need: an engine on a database of their own.
type bundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
	url  string
	eng  *engine.Engine
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool, url := pgtest.NewPool(t)
	eng, err := engine.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &bundle{ctx: ctx, pool: pool, url: url, eng: eng}
}

// advanceClock moves the database's clock (workflow.now(), which every rule
// reads) forward by d, as the schema's owner may: leases expire, retries and
// timers come due, deadlines pass and retention deletes without waiting.
func (b *bundle) advanceClock(t *testing.T, d time.Duration) {
	t.Helper()
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_settings
		set clock_offset = clock_offset + $1::bigint * interval '1 microsecond'`, d.Microseconds()); err != nil {
		t.Fatalf("advance the clock by %s: %v", d, err)
	}
}

// clockNow reads the database's clock (workflow.now()).
func (b *bundle) clockNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	if err := b.pool.QueryRow(b.ctx, "select workflow.now()").Scan(&now); err != nil {
		t.Fatalf("read the clock: %v", err)
	}
	return now
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// create records a run or fails the test.
func (b *bundle) create(t *testing.T, p engine.CreateParams) string {
	t.Helper()
	res, err := b.eng.CreateRun(b.ctx, p)
	if err != nil {
		t.Fatalf("create run: %v", err)
	}
	return res.ID
}

// eventTypes returns the run's audit trail as a list of event types.
func (b *bundle) eventTypes(t *testing.T, id string) []engine.EventType {
	t.Helper()
	evs, err := b.eng.ListEvents(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]engine.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func (b *bundle) get(t *testing.T, id string) engine.Run {
	t.Helper()
	r, err := b.eng.GetRun(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (b *bundle) claim(t *testing.T, worker string, prefixes []string, limit int) []engine.ClaimedRun {
	t.Helper()
	return b.claimIn(t, "", worker, prefixes, limit)
}

// claimIn is claim by a worker of namespace ns ("" for default).
func (b *bundle) claimIn(t *testing.T, ns, worker string, prefixes []string, limit int) []engine.ClaimedRun {
	t.Helper()
	got, err := b.eng.ClaimRuns(b.ctx, engine.ClaimParams{
		WorkerID: worker, TypePrefixes: prefixes, Runtime: "go", Limit: limit, LeaseDuration: 30 * time.Second,
		Namespace: ns,
	})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return got
}

func (b *bundle) ctxWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(b.ctx)
}

// session holds one connection of pool for the test (session settings stay
// on it) and returns it with a function that runs a statement on it and
// fails the test with the statement's first word when it fails.
func session(t *testing.T, ctx context.Context, pool *pgxpool.Pool) (*pgxpool.Conn, func(sql string, args ...any)) {
	t.Helper()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	return conn, func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", strings.Fields(sql)[0], err)
		}
	}
}

// leased is a claimed run as a claim_runs query selecting id::text and
// lease_token returns it.
type leased struct {
	ID    string
	Token int64
}

// claimLeases runs such a claim_runs query on q.
func (b *bundle) claimLeases(t *testing.T, q querier, sql string, args ...any) []leased {
	t.Helper()
	rows, err := q.Query(b.ctx, sql, args...)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[leased])
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return runs
}

// querier is a test's session: a pooled connection or one of its own.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// genericPlan prepares query as name on conn and returns the plan of its
// execution with args, which are literals of the test's own (EXPLAIN
// EXECUTE takes no parameters). Under plan_cache_mode force_generic_plan
// it is the plan a function's statement gets.
func genericPlan(t *testing.T, ctx context.Context, conn querier, name, query string, args ...string) string {
	t.Helper()
	if _, err := conn.Exec(ctx, "prepare "+name+" as "+query); err != nil {
		t.Fatalf("prepare %s: %v", name, err)
	}
	return explainPrepared(t, ctx, conn, name, args...)
}

// explainPrepared returns the plan of an execution of the statement
// prepared as name on conn with args (literals, as for genericPlan): the
// plan the session has cached for it, when it has one.
func explainPrepared(t *testing.T, ctx context.Context, conn querier, name string, args ...string) string {
	t.Helper()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + a + "'"
	}
	rows, err := conn.Query(ctx, "explain execute "+name+"("+strings.Join(quoted, ", ")+")")
	if err != nil {
		t.Fatalf("explain %s: %v", name, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("explain %s: %v", name, err)
	}
	return strings.Join(lines, "\n")
}

// noticeConn opens a connection of its own that keeps the notices the
// server sends it (auto_explain's plans, once the caller loads it with
// log_level notice). notices returns those received since its last call and
// forgets them; set runs statements on the connection.
func (b *bundle) noticeConn(t *testing.T) (conn *pgx.Conn, notices func() string, set func(statements ...string)) {
	t.Helper()
	cfg, err := pgx.ParseConfig(b.url)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		got = append(got, n.Message)
		mu.Unlock()
	}
	conn, err = pgx.ConnectConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	notices = func() string {
		mu.Lock()
		defer mu.Unlock()
		all := strings.Join(got, "\n")
		got = nil
		return all
	}
	set = func(statements ...string) {
		t.Helper()
		for _, s := range statements {
			if _, err := conn.Exec(b.ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	return conn, notices, set
}
