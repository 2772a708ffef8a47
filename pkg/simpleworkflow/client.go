package simpleworkflow

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Client records, inspects and cancels runs. It is safe for concurrent use.
type Client struct {
	eng  *engine.Engine
	pool *pgxpool.Pool
	own  bool
}

// Connect opens a connection pool to databaseURL and returns a Client that
// owns it (Close closes it). The schema must already be migrated; see
// Migrate.
func Connect(ctx context.Context, databaseURL string) (*Client, error) {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	c, err := NewClient(pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	c.own = true
	return c, nil
}

// NewClient returns a Client on an existing pool, which the caller keeps
// owning.
func NewClient(pool *pgxpool.Pool) (*Client, error) {
	eng, err := engine.New(pool)
	if err != nil {
		return nil, err
	}
	return &Client{eng: eng, pool: pool}, nil
}

// Close closes the pool if the Client opened it.
func (c *Client) Close() {
	if c.own {
		c.pool.Close()
	}
}

// Migrate applies the inbox schema migrations that the database lacks. It is
// idempotent and safe to run from several processes at once.
func (c *Client) Migrate(ctx context.Context) error {
	_, err := engine.Migrate(ctx, c.pool)
	return err
}

// SchemaVersion asks the database which version of the inbox schema it
// holds (workflow.schema_version(), which any of the three roles may call).
func (c *Client) SchemaVersion(ctx context.Context) (int, error) {
	return engine.InstalledSchemaVersion(ctx, c.pool)
}

// CreateOptions are the optional settings of a new run.
type CreateOptions struct {
	// IdempotencyKey deduplicates: a second Create with the same key records
	// nothing and returns the first run's ID. Up to 512 characters.
	IdempotencyKey string
	// Priority orders runs: lower runs first. Defaults to 100.
	Priority *int
	// RunAt delays the first attempt. Defaults to now.
	RunAt time.Time
	// MaxAttempts bounds the attempts, 1 to 1000. Defaults to 3.
	MaxAttempts int
	// RetryPolicy overrides the default backoff of attempt² minutes.
	RetryPolicy *RetryPolicy
	// Deadline fails the run with "deadline exceeded" this long after its
	// creation (by the database clock), wherever it is: pending, parked or
	// running. Zero means none.
	Deadline time.Duration
	// TraceParent is the W3C traceparent stored with the run; the spans of
	// its attempts link to it. Empty takes the span context of the ctx
	// given to Create (none when ctx carries no span).
	TraceParent string
	// ConcurrencyKey groups runs for the flow limits of their type (at most
	// MaxLeasedPerKey of one key leased at once, a rate per key): a
	// customer, a tenant, an external account. 1 to 255 characters; empty
	// sets none.
	ConcurrencyKey string
	// Namespace is the namespace the run belongs to. Empty: the one the
	// database login records for ("default" for the schema's owner); a
	// login bound to several namespaces must name one.
	Namespace string
	// TypeNamespace runs a type that another namespace shares with
	// Namespace, among that namespace's workers. Empty: Namespace's own
	// type.
	TypeNamespace string
}

// RetryPolicy is a run's own backoff: the delay before attempt n+1 is
// n² × BaseDelay plus up to 10 % jitter, capped at MaxDelay when it is set.
type RetryPolicy struct {
	// BaseDelay defaults to one minute.
	BaseDelay time.Duration
	// MaxDelay caps the delay; zero means no cap.
	MaxDelay time.Duration
}

// CreateResult identifies the run that holds an intent.
type CreateResult struct {
	// ID is the run's id.
	ID string
	// Created is false when the idempotency key was already taken; ID is
	// then the existing run's.
	Created bool
}

// Create records an intent to run workflowType with payload, which must
// marshal to a JSON object (a json.RawMessage or []byte is used as is). When
// Create returns without error the run is durable.
func (c *Client) Create(ctx context.Context, workflowType string, payload any, opts *CreateOptions) (CreateResult, error) {
	return c.CreateIn(ctx, c.pool, workflowType, payload, opts)
}

// DB is what CreateIn writes through: a pgx.Tx, a *pgx.Conn or a
// *pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CreateIn is Create within the caller's transaction (the transactional
// outbox): pass the pgx.Tx that holds your own writes, and the run — its
// audit event and the wake-up of its workers — commits or rolls back with
// them. Workers see it only once the transaction commits. The idempotency
// key works as in Create.
func (c *Client) CreateIn(ctx context.Context, db DB, workflowType string, payload any, opts *CreateOptions) (CreateResult, error) {
	raw, err := marshalPayload(payload)
	if err != nil {
		return CreateResult{}, fmt.Errorf("create %s: %w", workflowType, err)
	}
	res, err := c.eng.CreateRunIn(ctx, db, createParams(traceParentOf(ctx), workflowType, raw, opts))
	if err != nil {
		return CreateResult{}, err
	}
	return CreateResult{ID: res.ID, Created: res.Created}, nil
}

// createParams is what the engine takes for one run. Without a traceparent
// of its own, the run stores the caller's (traceParentOf its context).
func createParams(callerTrace, workflowType string, payload json.RawMessage, opts *CreateOptions) engine.CreateParams {
	p := engine.CreateParams{Type: workflowType, Payload: payload, TraceParent: callerTrace}
	if opts != nil && opts.TraceParent != "" {
		p.TraceParent = opts.TraceParent
	}
	if opts != nil {
		p.IdempotencyKey = opts.IdempotencyKey
		p.ConcurrencyKey = opts.ConcurrencyKey
		p.Namespace, p.TypeNamespace = opts.Namespace, opts.TypeNamespace
		p.Priority = opts.Priority
		p.MaxAttempts = opts.MaxAttempts
		p.Deadline = opts.Deadline
		if !opts.RunAt.IsZero() {
			at := opts.RunAt
			p.RunAt = &at
		}
		if opts.RetryPolicy != nil {
			p.RetryPolicy = &engine.RetryPolicy{BaseDelay: opts.RetryPolicy.BaseDelay, MaxDelay: opts.RetryPolicy.MaxDelay}
		}
	}
	return p
}

func marshalPayload(payload any) (json.RawMessage, error) {
	switch p := payload.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case json.RawMessage:
		return p, nil
	case []byte:
		return p, nil
	case string:
		return json.RawMessage(p), nil
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("marshal payload: %w", err)
	}
	return raw, nil
}

// Cancel cancels a pending or leased run. A worker running it sees its
// handler's context cancelled promptly. It reports whether this call
// cancelled the run (false when it had already finished).
func (c *Client) Cancel(ctx context.Context, runID string) (bool, error) {
	return c.eng.CancelRun(ctx, runID)
}

// Get returns a run. The error wraps ErrNotFound when there is none.
func (c *Client) Get(ctx context.Context, runID string) (*Run, error) {
	r, err := c.eng.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	return runFromEngine(r), nil
}

// ListOptions filters and pages List.
type ListOptions struct {
	// TypePrefix keeps runs whose type starts with it (taken literally).
	TypePrefix string
	// Statuses keeps runs in one of these statuses; empty keeps all.
	Statuses []Status
	// Limit is the page size: 100 when zero, at most 1000.
	Limit int
	// Cursor continues from a previous page's NextCursor.
	Cursor string
}

// RunPage is one page of List.
type RunPage struct {
	Runs []*Run
	// NextCursor fetches the next page; empty on the last one.
	NextCursor string
}

// List returns runs oldest first, one page at a time.
func (c *Client) List(ctx context.Context, opts ListOptions) (RunPage, error) {
	page, err := c.eng.ListRuns(ctx, engine.ListParams{
		TypePrefix: opts.TypePrefix, Statuses: statusesToEngine(opts.Statuses), Limit: opts.Limit, Cursor: opts.Cursor,
	})
	if err != nil {
		return RunPage{}, err
	}
	out := RunPage{NextCursor: page.NextCursor, Runs: make([]*Run, len(page.Runs))}
	for i, r := range page.Runs {
		out.Runs[i] = runFromEngine(r)
	}
	return out, nil
}

// Events returns a run's audit trail, oldest first.
func (c *Client) Events(ctx context.Context, runID string) ([]Event, error) {
	evs, err := c.eng.ListEvents(ctx, runID)
	if err != nil {
		return nil, err
	}
	return eventsFromEngine(evs), nil
}

// Pool returns the connection pool the Client uses.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }
