package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
)

// Status is the state of a run in the inbox.
type Status string

// The statuses of a run. Succeeded, Failed and Cancelled are final.
const (
	StatusPending   Status = "pending"
	StatusLeased    Status = "leased"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Finished reports whether s is a final status.
func (s Status) Finished() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// RetryPolicy is a run's own backoff: the delay before attempt n+1 is
// n² × BaseDelay plus up to 10 % jitter, capped at MaxDelay when it is set.
// A zero BaseDelay means the default of one minute.
type RetryPolicy struct {
	BaseDelay time.Duration
	MaxDelay  time.Duration
}

// Source names the Kubernetes object a run was mirrored from.
type Source struct {
	Namespace string
	Name      string
	UID       string
}

// Run is one row of the inbox.
type Run struct {
	ID             string
	Type           string
	Payload        json.RawMessage
	Status         Status
	Priority       int
	RunAt          time.Time
	IdempotencyKey string
	Attempt        int
	MaxAttempts    int
	LeasedBy       string
	LeaseUntil     *time.Time
	LastError      string
	Result         json.RawMessage
	RetryPolicy    *RetryPolicy
	Source         *Source
	StartedAt      *time.Time
	FinishedAt     *time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	DeletedAt      *time.Time
	// LeaseToken is the token of the latest claim (0 before the first).
	LeaseToken int64
	// ParentID and ParentStep name the run and step that started this one.
	ParentID   string
	ParentStep string
	// DeadlineAt is when the run fails with "deadline exceeded".
	DeadlineAt *time.Time
	// Wait says what a parked run waits for; nil when it is not parked.
	Wait *Wait
	// TraceParent is the W3C traceparent stored with the run ("" when none).
	TraceParent string
	// ConcurrencyKey groups runs for their type's per-key flow limits ("" when none).
	ConcurrencyKey string
	// Namespace is the namespace the run belongs to (its tenant).
	Namespace string
	// TypeNamespace is the namespace whose registry and workers run its
	// type: Namespace, unless another namespace shares the type with it.
	TypeNamespace string
}

// Wait is what a parked run waits for. The run is pending, with run_at at
// the time the wait ends (far in the future for an open wait).
type Wait struct {
	// Kind is StepKindSleep, StepKindSignal or StepKindChild.
	Kind StepKind
	// Step is the journal entry the wait will fill in.
	Step string
	// Signal is the signal name waited for.
	Signal string
	// Until is when the wait ends by itself; nil for an open wait.
	Until *time.Time
}

// FarFuture is the run_at of a run parked on an open wait.
var FarFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// CreateParams describes a run to record. Zero values take the defaults:
// priority 100, run now, 3 attempts, the default retry policy.
type CreateParams struct {
	Type           string
	Payload        json.RawMessage
	Priority       *int
	RunAt          *time.Time
	IdempotencyKey string
	MaxAttempts    int
	RetryPolicy    *RetryPolicy
	Source         *Source
	// Deadline fails the run ("deadline exceeded") this long after its
	// creation, by the database clock; DeadlineAt does it at an instant.
	// At most one of the two.
	Deadline   time.Duration
	DeadlineAt *time.Time
	// TraceParent is the W3C traceparent of the context recording the run
	// (00-<trace id>-<parent id>-<flags>, lowercase hex); empty records
	// none. The spans of the run's attempts link to it.
	TraceParent string
	// ConcurrencyKey groups runs for their type's per-key flow limits
	// (a customer, a tenant; 1 to 255 characters); empty sets none.
	ConcurrencyKey string
	// Namespace is the namespace the run belongs to. Empty: the source's
	// namespace for a mirrored run, else the one the database login
	// records for ("default" for the schema's owner). A login may name only
	// a namespace it is bound to as a producer.
	Namespace string
	// TypeNamespace asks for a type that another namespace's registry
	// shares with Namespace; the run then executes among that namespace's
	// workers. Empty: Namespace's own type.
	TypeNamespace string
}

// CreateResult says which run holds the intent and whether this call created it.
type CreateResult struct {
	ID string
	// Created is false when a run with the same idempotency key already existed;
	// ID is then that run's.
	Created bool
}

// CreateRun records an intent. With an idempotency key, a second call with the
// same key records nothing and returns the first run's id with Created false.
func (e *Engine) CreateRun(ctx context.Context, p CreateParams) (CreateResult, error) {
	return e.CreateRunIn(ctx, e.pool, p)
}

// Querier runs statements: satisfied by pgx.Tx, *pgx.Conn and
// *pgxpool.Pool.
type Querier = queries.DBTX

// CreateRunIn is CreateRun through db: inside a caller's transaction the
// run (its event and its workers' wake-up) commits or rolls back with the
// caller's own writes.
func (e *Engine) CreateRunIn(ctx context.Context, db Querier, p CreateParams) (CreateResult, error) {
	if err := p.Validate(); err != nil {
		return CreateResult{}, fmt.Errorf("create run: %w", err)
	}
	payload := p.Payload
	if len(strings.TrimSpace(string(payload))) == 0 {
		payload = json.RawMessage("{}")
	}
	arg := queries.RunInsertParams{
		Type:           p.Type,
		Payload:        payload,
		Priority:       int32Ptr(p.Priority),
		RunAt:          p.RunAt,
		IdempotencyKey: nullIfEmpty(p.IdempotencyKey),
		MaxAttempts:    int32OrNil(p.MaxAttempts),
		DeadlineAt:     p.DeadlineAt,
		DeadlineMs:     millisOrNil(p.Deadline),
		Traceparent:    nullIfEmpty(p.TraceParent),
		ConcurrencyKey: nullIfEmpty(p.ConcurrencyKey),
		Namespace:      nullIfEmpty(p.Namespace),
		TypeNamespace:  nullIfEmpty(p.TypeNamespace),
	}
	if p.RetryPolicy != nil {
		arg.RetryBaseMs = millisOrNil(p.RetryPolicy.BaseDelay)
		arg.RetryMaxMs = millisOrNil(p.RetryPolicy.MaxDelay)
	}
	if p.Source != nil {
		arg.SourceNamespace = nullIfEmpty(p.Source.Namespace)
		arg.SourceName = nullIfEmpty(p.Source.Name)
		arg.SourceUid = nullIfEmpty(p.Source.UID)
	}
	// One row: the new run, or the one that already holds the key.
	row, err := queries.New(db).RunInsert(ctx, arg)
	if err != nil {
		return CreateResult{}, translate("create run", err)
	}
	return CreateResult{ID: deref(row.ID), Created: deref(row.Created)}, nil
}

// runFromRow is a run as RunGet and RunList read it (the columns of
// workflow.run_view).
func runFromRow(row queries.RunGetRow) Run {
	r := Run{
		ID: deref(row.ID), Type: deref(row.Type), Payload: row.Payload, Status: Status(deref(row.Status)),
		Priority: int(deref(row.Priority)), RunAt: deref(row.RunAt), Attempt: int(deref(row.Attempt)),
		MaxAttempts: int(deref(row.MaxAttempts)), LeaseUntil: row.LeaseUntil, Result: row.Result,
		StartedAt: row.StartedAt, FinishedAt: row.FinishedAt, CreatedAt: deref(row.CreatedAt),
		UpdatedAt: deref(row.UpdatedAt), DeletedAt: row.DeletedAt, LeaseToken: deref(row.LeaseToken),
		ParentID: deref(row.ParentID), ParentStep: deref(row.ParentStep), DeadlineAt: row.DeadlineAt,
		TraceParent: deref(row.Traceparent), ConcurrencyKey: deref(row.ConcurrencyKey),
		Namespace: deref(row.Namespace), TypeNamespace: deref(row.TypeNamespace),
		IdempotencyKey: deref(row.IdempotencyKey), LeasedBy: deref(row.LeasedBy), LastError: deref(row.LastError),
	}
	if row.WaitKind != nil {
		r.Wait = &Wait{Kind: StepKind(*row.WaitKind), Step: deref(row.WaitStep), Signal: deref(row.WaitSignal)}
		if r.RunAt.Before(FarFuture) {
			until := r.RunAt
			r.Wait.Until = &until
		}
	}
	r.RetryPolicy = retryPolicyOf(row.RetryBaseMs, row.RetryMaxMs)
	if row.SourceUid != nil || row.SourceName != nil {
		r.Source = &Source{Namespace: deref(row.SourceNamespace), Name: deref(row.SourceName), UID: deref(row.SourceUid)}
	}
	return r
}

// GetRun returns the run with the given id, or an error wrapping ErrNotFound.
func (e *Engine) GetRun(ctx context.Context, id string) (Run, error) {
	row, err := e.q.RunGet(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, fmt.Errorf("get run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Run{}, translate("get run "+id, err)
	}
	return runFromRow(row), nil
}

// ListParams filters and pages ListRuns.
type ListParams struct {
	// TypePrefix keeps runs whose type starts with it, taken literally.
	TypePrefix string
	// Statuses keeps runs in one of these statuses; empty keeps all.
	Statuses []Status
	// Limit is the page size: 100 when zero, at most 1000.
	Limit int
	// Cursor continues after the page that returned it; empty starts at the
	// oldest run.
	Cursor string
}

// ListPage is one page of runs in creation order.
type ListPage struct {
	Runs []Run
	// NextCursor fetches the next page; empty when this was the last one.
	NextCursor string
}

// ListRuns returns runs that are not soft-deleted, oldest first, one page at a
// time.
func (e *Engine) ListRuns(ctx context.Context, p ListParams) (ListPage, error) {
	limit := p.Limit
	if limit == 0 {
		limit = 100
	}
	if limit < 1 || limit > 1000 {
		return ListPage{}, fmt.Errorf("list runs: %w: limit must be between 1 and 1000, got %d", ErrInvalid, p.Limit)
	}
	statuses := make([]string, 0, len(p.Statuses))
	for _, s := range p.Statuses {
		statuses = append(statuses, string(s))
	}
	arg := queries.RunListParams{TypePrefix: nullIfEmpty(p.TypePrefix), Statuses: statuses, MaxRows: clamp32(limit + 1)}
	if p.Cursor != "" {
		at, id, err := DecodeCursor(p.Cursor)
		if err != nil {
			return ListPage{}, fmt.Errorf("list runs: %w", err)
		}
		arg.AfterCreatedAt, arg.AfterID = &at, &id
	}
	rows, err := e.q.RunList(ctx, arg)
	if err != nil {
		return ListPage{}, translate("list runs", err)
	}
	runs := make([]Run, len(rows))
	for i, row := range rows {
		runs[i] = runFromRow(queries.RunGetRow(row))
	}
	page := ListPage{Runs: runs}
	if len(runs) > limit {
		page.Runs = runs[:limit]
		last := page.Runs[limit-1]
		page.NextCursor = EncodeCursor(last.CreatedAt, last.ID)
	}
	return page, nil
}

// CancelRun cancels a pending or leased run; a worker holding it notices at
// its next heartbeat (or at once, through the cancellation notification). It
// reports whether the run was cancelled by this call: false when it had
// already finished or does not exist.
func (e *Engine) CancelRun(ctx context.Context, id string) (bool, error) {
	return e.CancelRunAs(ctx, id, "")
}

// MaxCancelledByBytes bounds the label CancelRunAs records.
const MaxCancelledByBytes = 256

// CancelRunAs is CancelRun recording who asked in the run's cancelled event
// ("by"): a label such as "WorkflowRun team-a/order-1 (spec.cancel)", cut to
// MaxCancelledByBytes. The event's reason is "requested".
func (e *Engine) CancelRunAs(ctx context.Context, id, by string) (bool, error) {
	ok, err := e.q.RunCancel(ctx, queries.RunCancelParams{ID: id, By: eventLabel(by)})
	if err != nil {
		return false, translate("cancel run "+id, err)
	}
	return deref(ok), nil
}

// eventLabel is a "who asked" label as an event records it: no NUL, valid
// UTF-8, at most MaxCancelledByBytes.
func eventLabel(by string) string {
	by = strings.ToValidUTF8(strings.ReplaceAll(by, "\x00", ""), "")
	if len(by) > MaxCancelledByBytes {
		by = strings.ToValidUTF8(by[:MaxCancelledByBytes], "")
	}
	return by
}

// FindRunByIdempotencyKey returns the id of the run holding key, or an error
// wrapping ErrNotFound.
func (e *Engine) FindRunByIdempotencyKey(ctx context.Context, key string) (string, error) {
	id, err := e.q.RunIDByIdempotencyKey(ctx, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("run with idempotency key %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return "", translate("find run by idempotency key", err)
	}
	return deref(id), nil
}
