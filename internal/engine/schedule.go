package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
)

// ConcurrencyPolicy says what a schedule's tick does while a run the
// schedule recorded earlier has not finished (is pending or leased), as in
// a Kubernetes CronJob.
type ConcurrencyPolicy string

// The concurrency policies of a schedule.
const (
	// ConcurrencyAllow records the tick's run anyway.
	ConcurrencyAllow ConcurrencyPolicy = "Allow"
	// ConcurrencyForbid skips the tick (FiringSkippedForbid).
	ConcurrencyForbid ConcurrencyPolicy = "Forbid"
	// ConcurrencyReplace cancels the unfinished runs and records the tick's
	// run (FiringReplaced).
	ConcurrencyReplace ConcurrencyPolicy = "Replace"
)

// FiringOutcome is what became of one tick of a schedule.
type FiringOutcome string

// The outcomes of a tick.
const (
	// FiringFired: the tick's run was recorded (or already existed under
	// the tick's idempotency key).
	FiringFired FiringOutcome = "fired"
	// FiringReplaced: the schedule's unfinished runs were cancelled and the
	// tick's run recorded.
	FiringReplaced FiringOutcome = "replaced"
	// FiringSkippedForbid: a run of the schedule was unfinished, so the
	// tick recorded none.
	FiringSkippedForbid FiringOutcome = "skipped_forbid"
	// FiringMissed: the tick was not started: a newer tick was due as well
	// (only the most recent due tick starts), or it was older than the
	// schedule's starting deadline.
	FiringMissed FiringOutcome = "missed"
	// FiringFailed: recording the run failed (the schedule's LastError says
	// why); the tick is not retried.
	FiringFailed FiringOutcome = "failed"
	// FiringBusy: a lock the tick needed (a run to cancel that another
	// transaction holds) was not free within half a second; nothing was
	// done and the schedule stays due for the next call.
	FiringBusy FiringOutcome = "busy"
)

// ScheduleSpec describes a cron schedule: at every tick of Cron in
// TimeZone, one run of Type with Payload is recorded. A schedule is named
// by Namespace and Name: a schedule mirrored from a Kubernetes
// WorkflowSchedule has the object's namespace, name and UID; one made
// directly has no namespace (and no UID).
type ScheduleSpec struct {
	// Name is lowercase letters, digits, '.', '_' and '-' (at most 253
	// characters), unique within the namespace.
	Name string
	// Namespace and UID name the WorkflowSchedule the schedule mirrors;
	// both empty otherwise. Only the schema's owner writes such a schedule.
	Namespace string
	UID       string
	// Cron is a five-field cron expression (minute hour day-of-month month
	// day-of-week) or a macro such as @daily.
	Cron string
	// TimeZone is a name of the time zone database, such as Europe/Berlin;
	// empty means UTC. Ticks are wall-clock times of the zone.
	TimeZone string
	// Type, Payload, Priority and MaxAttempts are those of each run; zero
	// values take the defaults of a run (payload {}, priority 100, three
	// attempts).
	Type        string
	Payload     json.RawMessage
	Priority    *int
	MaxAttempts int
	// Deadline, when positive, fails each run that long after it is
	// recorded, as CreateParams.Deadline does.
	Deadline time.Duration
	// RetryPolicy and ConcurrencyKey are each run's, as in CreateParams
	// (nil and empty: none). Delays are kept to the millisecond.
	RetryPolicy    *RetryPolicy
	ConcurrencyKey string
	// ConcurrencyPolicy is Allow when empty.
	ConcurrencyPolicy ConcurrencyPolicy
	// StartingDeadline, when set, is how late (in whole seconds) a tick may
	// still start; an older one is missed.
	StartingDeadline *time.Duration
	// Suspend stops the schedule from firing; resuming it counts ticks from
	// the moment it resumes.
	Suspend bool
}

// Schedule is a stored schedule with what its firing did so far.
type Schedule struct {
	ScheduleSpec
	ID string
	// NextTickAt is the next tick to fire (stale while suspended).
	NextTickAt time.Time
	// LastTickAt is the last tick dealt with, LastOutcome what became of
	// it and LastError, for FiringFailed, why.
	LastTickAt  *time.Time
	LastOutcome FiringOutcome
	LastError   string
	// LastFiredRun is the run of the last tick that recorded one ("" when none).
	LastFiredRun string
	// UnfinishedRuns counts the schedule's runs that are pending or leased.
	UnfinishedRuns int64
	// CreatedBy is the database user that created the schedule.
	CreatedBy string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ScheduleFiring is one tick dealt with by FireDueSchedules.
type ScheduleFiring struct {
	ScheduleID string
	Tick       time.Time
	// RunID is the tick's run, for FiringFired and FiringReplaced.
	RunID   string
	Outcome FiringOutcome
}

// ScheduleFilter selects schedules to list. The zero value lists them all.
type ScheduleFilter struct {
	// Namespace lists one namespace's schedules.
	Namespace string
	// Direct lists only the schedules with no namespace (made directly,
	// not mirrored from Kubernetes); Namespace must be empty then.
	Direct bool
	// Name lists only the schedule of that name.
	Name string
	// Namespaces, when not nil, are the only namespaces listed (a schedule
	// with no namespace is of none).
	Namespaces []string
}

// validText refuses text the database cannot store (NUL, invalid UTF-8),
// naming the field.
func validText(field, s string) error {
	if strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s must be UTF-8 text without NUL characters", ErrInvalid, field)
	}
	return nil
}

// PutSchedule creates the schedule named by spec's Namespace and Name, or
// updates it, and returns it as stored. The database checks every field and
// names the one it refuses (an error wrapping ErrInvalid). The next tick is
// computed from the database clock when the schedule is new, its cron
// expression or time zone changed, or it is resumed.
func (e *Engine) PutSchedule(ctx context.Context, spec ScheduleSpec) (Schedule, error) {
	op := "put schedule " + spec.Name
	if spec.Namespace != "" {
		op = "put schedule " + spec.Namespace + "/" + spec.Name
	}
	for _, f := range []struct{ name, value string }{
		{"name", spec.Name}, {"namespace", spec.Namespace}, {"uid", spec.UID}, {"cron expression", spec.Cron},
		{"time zone", spec.TimeZone}, {"type", spec.Type},
	} {
		if err := validText(f.name, f.value); err != nil {
			return Schedule{}, fmt.Errorf("%s: %w", op, err)
		}
	}
	if err := ValidatePayload(spec.Payload); err != nil {
		return Schedule{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := ValidateConcurrencyKey(spec.ConcurrencyKey); err != nil {
		return Schedule{}, fmt.Errorf("%s: %w", op, err)
	}
	var retryBase, retryMax *int64
	if rp := spec.RetryPolicy; rp != nil {
		if rp.BaseDelay < 0 || rp.MaxDelay < 0 {
			return Schedule{}, fmt.Errorf("%s: %w: retry delays must not be negative", op, ErrInvalid)
		}
		retryBase, retryMax = millisOrNil(rp.BaseDelay), millisOrNil(rp.MaxDelay)
	}
	if spec.Deadline < 0 {
		return Schedule{}, fmt.Errorf("%s: %w: deadline must not be negative", op, ErrInvalid)
	}
	payload := spec.Payload
	if len(strings.TrimSpace(string(payload))) == 0 {
		payload = json.RawMessage("{}")
	}
	zone := spec.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	priority := DefaultPriority
	if spec.Priority != nil {
		priority = *spec.Priority
	}
	attempts := spec.MaxAttempts
	if attempts == 0 {
		attempts = DefaultMaxAttempts
	}
	policy := spec.ConcurrencyPolicy
	if policy == "" {
		policy = ConcurrencyAllow
	}
	var deadline *int64
	if spec.Deadline > 0 {
		us := spec.Deadline.Microseconds()
		deadline = &us
	}
	var starting *int32
	if spec.StartingDeadline != nil {
		s := clamp32(int(*spec.StartingDeadline / time.Second))
		starting = &s
	}
	_, err := e.q.SchedulePut(ctx, queries.SchedulePutParams{
		Name: spec.Name, Cron: spec.Cron, Type: spec.Type, Payload: payload, TimeZone: zone,
		Priority: clamp32(priority), MaxAttempts: clamp32(attempts), DeadlineUs: deadline,
		ConcurrencyPolicy: string(policy), StartingDeadlineSeconds: starting, Suspend: spec.Suspend,
		Namespace: nullIfEmpty(spec.Namespace), Uid: nullIfEmpty(spec.UID),
		RetryBaseMs: retryBase, RetryMaxMs: retryMax, ConcurrencyKey: nullIfEmpty(spec.ConcurrencyKey),
	})
	if err != nil {
		return Schedule{}, translate(op, err)
	}
	return e.GetSchedule(ctx, spec.Namespace, spec.Name)
}

// GetSchedule returns the schedule of a namespace ("" for one made
// directly) and name, or an error wrapping ErrNotFound.
func (e *Engine) GetSchedule(ctx context.Context, namespace, name string) (Schedule, error) {
	got, err := e.ListSchedules(ctx, ScheduleFilter{Namespace: namespace, Direct: namespace == "", Name: name})
	if err != nil {
		return Schedule{}, err
	}
	if len(got) == 0 {
		return Schedule{}, fmt.Errorf("schedule %s: %w", name, ErrNotFound)
	}
	return got[0], nil
}

// DeleteSchedule deletes the schedule of a namespace ("" for one made
// directly) and name, and reports whether there was one. Its runs stay.
func (e *Engine) DeleteSchedule(ctx context.Context, namespace, name string) (bool, error) {
	deleted, err := e.q.ScheduleDelete(ctx, queries.ScheduleDeleteParams{Name: name, Namespace: nullIfEmpty(namespace)})
	if err != nil {
		return false, translate("delete schedule "+name, err)
	}
	return deref(deleted), nil
}

// FireDueSchedules fires up to limit due schedules (1 to 10000) and returns
// every tick it dealt with. Each tick of a schedule records at most one run
// whoever calls this and however many call it at once; a caller that fails
// before committing leaves its ticks due for the next call.
func (e *Engine) FireDueSchedules(ctx context.Context, limit int) ([]ScheduleFiring, error) {
	rows, err := e.q.ScheduleFire(ctx, clamp32(limit))
	if err != nil {
		return nil, translate("fire due schedules", err)
	}
	out := make([]ScheduleFiring, len(rows))
	for i, row := range rows {
		out[i] = ScheduleFiring{ScheduleID: deref(row.ScheduleID), Tick: deref(row.Tick), RunID: deref(row.RunID),
			Outcome: FiringOutcome(deref(row.Outcome))}
	}
	return out, nil
}

// ListSchedules returns the schedules f selects, by namespace then name,
// each with its unfinished runs counted.
func (e *Engine) ListSchedules(ctx context.Context, f ScheduleFilter) ([]Schedule, error) {
	if f.Direct && f.Namespace != "" {
		return nil, fmt.Errorf("list schedules: %w: a namespace was given with Direct", ErrInvalid)
	}
	var ns *string
	switch {
	case f.Direct:
		empty := ""
		ns = &empty
	case f.Namespace != "":
		ns = &f.Namespace
	}
	rows, err := e.q.ScheduleList(ctx, queries.ScheduleListParams{
		Namespace: ns, Name: nullIfEmpty(f.Name), Namespaces: f.Namespaces,
	})
	if err != nil {
		return nil, translate("list schedules", err)
	}
	out := make([]Schedule, len(rows))
	for i, row := range rows {
		out[i] = scheduleFromRow(row)
	}
	return out, nil
}

// scheduleFromRow is a schedule as ScheduleList reads it.
func scheduleFromRow(row queries.ScheduleListRow) Schedule {
	var s Schedule
	s.ID, s.Name, s.Namespace, s.UID = deref(row.ID), deref(row.Name), deref(row.SourceNamespace), deref(row.SourceUid)
	s.Cron, s.TimeZone, s.Type, s.Payload = deref(row.Cron), deref(row.TimeZone), deref(row.Type), row.Payload
	s.Priority, s.MaxAttempts, s.Suspend = intPtr(row.Priority), int(deref(row.MaxAttempts)), deref(row.Suspend)
	s.NextTickAt, s.LastTickAt, s.LastOutcome = deref(row.NextTickAt), row.LastTickAt, FiringOutcome(deref(row.LastOutcome))
	s.LastError, s.LastFiredRun, s.UnfinishedRuns = deref(row.LastError), deref(row.LastFiredRun), deref(row.UnfinishedRuns)
	s.CreatedBy, s.CreatedAt, s.UpdatedAt = deref(row.CreatedBy), deref(row.CreatedAt), deref(row.UpdatedAt)
	s.ConcurrencyPolicy = ConcurrencyPolicy(deref(row.ConcurrencyPolicy))
	s.ConcurrencyKey = deref(row.ConcurrencyKey)
	if row.DeadlineUs != nil {
		s.Deadline = time.Duration(*row.DeadlineUs) * time.Microsecond
	}
	if row.StartingDeadlineSeconds != nil {
		d := time.Duration(*row.StartingDeadlineSeconds) * time.Second
		s.StartingDeadline = &d
	}
	s.RetryPolicy = retryPolicyOf(row.RetryBaseMs, row.RetryMaxMs)
	return s
}

// ScheduleRun is one of a schedule's runs, as ScheduleLatestRuns lists
// them: its idempotency key names the tick it was recorded for.
type ScheduleRun struct {
	ID             string
	Status         Status
	CreatedAt      time.Time
	FinishedAt     *time.Time
	IdempotencyKey string
}

// ScheduleLatestRuns returns the latest runs (at most limit, 1 to 1000) of
// the schedule of a namespace ("" for one made directly) and name, newest
// first, through workflow.schedule_latest_runs (whose header says which
// runs it finds and how); none when there is no such schedule.
func (e *Engine) ScheduleLatestRuns(ctx context.Context, namespace, name string, limit int) ([]ScheduleRun, error) {
	if limit < 1 || limit > 1000 {
		return nil, fmt.Errorf("schedule runs: %w: the limit must be between 1 and 1000, got %d", ErrInvalid, limit)
	}
	for _, f := range []struct{ name, value string }{{"name", name}, {"namespace", namespace}} {
		if err := validText(f.name, f.value); err != nil {
			return nil, fmt.Errorf("schedule runs: %w", err)
		}
	}
	rows, err := e.q.ScheduleLatestRuns(ctx, queries.ScheduleLatestRunsParams{
		Namespace: nullIfEmpty(namespace), Name: name, MaxRows: clamp32(limit),
	})
	if err != nil {
		return nil, translate("schedule runs", err)
	}
	out := make([]ScheduleRun, len(rows))
	for i, row := range rows {
		out[i] = ScheduleRun{ID: deref(row.ID), Status: Status(deref(row.Status)), CreatedAt: deref(row.CreatedAt),
			FinishedAt: row.FinishedAt, IdempotencyKey: deref(row.IdempotencyKey)}
	}
	return out, nil
}
