package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Bounds of what a run's page shows: a run can gather many events and
// signals, and a payload may be a megabyte.
const (
	maxEvents   = 500
	maxSteps    = 300
	maxSignals  = 200
	maxChildren = 200
	maxAttempts = 1000
	// maxJSON bounds the payload and the result as shown; maxSmallJSON an
	// event's data, a step's output, a signal's payload (read cut from the
	// database, so a page of hundreds of them stays small).
	maxJSON      = 64 << 10
	maxSmallJSON = 4 << 10
	// maxAttemptError bounds the error shown for an attempt (in characters).
	maxAttemptError = 2000
)

// stepRow is one entry of a run's journal.
type stepRow struct {
	Name       string
	Position   int
	Kind       string
	Outcome    string
	Error      string
	Attempt    int
	ChildID    string
	WakeAt     *time.Time
	StartedAt  time.Time
	FinishedAt *time.Time
}

// signalRow is one signal sent to a run.
type signalRow struct {
	ID         int64
	Name       string
	CreatedAt  time.Time
	ConsumedAt *time.Time
	ConsumedBy string
}

// eventRow is one entry of a run's audit trail.
type eventRow struct {
	ID        int64
	Type      string
	Data      string
	CreatedAt time.Time
}

// attemptRow is one attempt of a run, read from its audit trail.
type attemptRow struct {
	Attempt int
	Worker  string
	Started time.Time
	Ended   *time.Time
	Outcome string
	Error   string
}

// runPage is what a run's page shows.
type runPage struct {
	Run            engine.Run
	Payload        string
	Result         string
	Events         []eventRow
	EventsCut      bool
	Attempts       []attemptRow
	AttemptsCut    bool
	Retries        []retryRow
	Steps          []stepRow
	StepsCut       bool
	Signals        []signalRow
	SignalsCut     bool
	Children       []engine.ChildRun
	ChildrenCut    bool
	DAG            *dagGraph
	Now            time.Time
	Finished       bool
	StepOutputs    map[int]string
	SignalPayloads map[int64]string
	// Log is what its handlers logged.
	Log runLog
	// Act is what the viewer may do to the run from its page.
	Act runActions
	// Inbox names the inbox database the run is in; Several says the
	// console reads more than one.
	Inbox   string
	Several bool
}

// errNoRun is returned for a run that does not exist.
var errNoRun = errors.New("no such run")

// loadRun reads everything a run's page shows from the run's inbox.
func (src *source) loadRun(ctx context.Context, id string) (runPage, error) {
	p := runPage{Now: time.Now(), StepOutputs: map[int]string{}, SignalPayloads: map[int64]string{}}
	run, err := src.eng.GetRun(ctx, id)
	if errors.Is(err, engine.ErrNotFound) {
		return p, errNoRun
	}
	if err != nil {
		return p, fmt.Errorf("run %s: %w", id, err)
	}
	p.Run, p.Finished = run, run.Status.Finished()
	p.Payload, p.Result = showJSON(run.Payload), showJSON(run.Result)

	rows, err := src.db.Query(ctx, `
select id, event_type, data, created_at
from workflow.run_latest_events($1::uuid, $2::integer, $3::integer)`, id, maxEvents+1, maxSmallJSON)
	if err != nil {
		return p, fmt.Errorf("run %s: events: %w", id, err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (eventRow, error) {
		var e eventRow
		err := row.Scan(&e.ID, &e.Type, &e.Data, &e.CreatedAt)
		e.Data = showJSONCut(e.Data, maxSmallJSON)
		return e, err
	})
	if err != nil {
		return p, fmt.Errorf("run %s: events: %w", id, err)
	}
	if len(events) > maxEvents {
		events, p.EventsCut = events[:maxEvents], true
	}
	slices.Reverse(events)
	p.Events = events
	if err := src.loadAttempts(ctx, &p); err != nil {
		return p, err
	}
	if err := src.loadRetries(ctx, &p); err != nil {
		return p, err
	}
	if err := src.loadJournal(ctx, &p); err != nil {
		return p, err
	}
	if p.Children, err = src.eng.ListChildren(ctx, id, maxChildren+1); err != nil {
		return p, fmt.Errorf("run %s: %w", id, err)
	}
	if len(p.Children) > maxChildren {
		p.Children, p.ChildrenCut = p.Children[:maxChildren], true
	}
	steps, err := src.eng.DAGSteps(ctx, id)
	if err != nil {
		return p, fmt.Errorf("run %s: %w", id, err)
	}
	if len(steps) > 0 {
		p.DAG = layoutDAG(steps)
	}
	return p, nil
}

// loadAttempts reads the attempts of a run from its audit trail: the
// lifecycle events that name an attempt (not heartbeats), grouped by it.
func (src *source) loadAttempts(ctx context.Context, p *runPage) error {
	rows, err := src.db.Query(ctx, `
select event_type, attempt, coalesce(worker_id, ''), coalesce(error, ''), created_at
from workflow.run_attempt_events($1::uuid, $2::integer, $3::integer)`, p.Run.ID, 3*maxAttempts, maxAttemptError)
	if err != nil {
		return fmt.Errorf("run %s: attempts: %w", p.Run.ID, err)
	}
	index := map[int]int{}
	var typ, worker, msg string
	var attempt int
	var at time.Time
	if _, err := pgx.ForEachRow(rows, []any{&typ, &attempt, &worker, &msg, &at}, func() error {
		if attempt < 1 {
			return nil
		}
		i, ok := index[attempt]
		if !ok {
			if len(p.Attempts) >= maxAttempts {
				p.AttemptsCut = true
				return nil
			}
			p.Attempts = append(p.Attempts, attemptRow{Attempt: attempt, Started: at})
			i = len(p.Attempts) - 1
			index[attempt] = i
		}
		a := &p.Attempts[i]
		if worker != "" {
			a.Worker = worker
		}
		switch typ {
		case "succeeded", "failed", "retried", "cancelled":
			end := at
			a.Ended, a.Outcome = &end, typ
			if msg != "" {
				a.Error = msg
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("run %s: attempts: %w", p.Run.ID, err)
	}
	return nil
}

// retryRow is one retry of a run from where it stopped.
type retryRow struct {
	At             time.Time
	PreviousStatus string
	By             string
	StepsRetried   *int
	WorkflowID     string
}

// loadRetries reads the first times the run was retried from where it
// stopped.
func (src *source) loadRetries(ctx context.Context, p *runPage) error {
	rows, err := src.db.Query(ctx, `
select created_at, coalesce(previous_status, ''), coalesce(retried_by, ''), steps_retried, coalesce(workflow_id, '')
from workflow.run_retries($1::uuid, $2::integer)`, p.Run.ID, maxAttempts)
	if err != nil {
		return fmt.Errorf("run %s: retries: %w", p.Run.ID, err)
	}
	p.Retries, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (retryRow, error) {
		var r retryRow
		return r, row.Scan(&r.At, &r.PreviousStatus, &r.By, &r.StepsRetried, &r.WorkflowID)
	})
	if err != nil {
		return fmt.Errorf("run %s: retries: %w", p.Run.ID, err)
	}
	return nil
}

// loadJournal reads the first steps of a run's journal and its latest
// signals, their outputs and payloads cut in the database.
func (src *source) loadJournal(ctx context.Context, p *runPage) error {
	id := p.Run.ID
	rows, err := src.db.Query(ctx, `
select name, position, kind, coalesce(outcome, ''), coalesce(error, ''), attempt, coalesce(child_id::text, ''),
       wake_at, started_at, finished_at, coalesce(output, '')
from workflow.run_first_steps($1::uuid, $2::integer, $3::integer)`, id, maxSteps+1, maxSmallJSON)
	if err != nil {
		return fmt.Errorf("run %s: journal: %w", id, err)
	}
	var out string
	var st stepRow
	if _, err := pgx.ForEachRow(rows, []any{&st.Name, &st.Position, &st.Kind, &st.Outcome, &st.Error, &st.Attempt,
		&st.ChildID, &st.WakeAt, &st.StartedAt, &st.FinishedAt, &out}, func() error {
		if len(p.Steps) == maxSteps {
			p.StepsCut = true
			return nil
		}
		p.Steps = append(p.Steps, st)
		p.StepOutputs[st.Position] = showJSONCut(out, maxSmallJSON)
		return nil
	}); err != nil {
		return fmt.Errorf("run %s: journal: %w", id, err)
	}

	rows, err = src.db.Query(ctx, `
select id, name, created_at, consumed_at, coalesce(consumed_by, ''), coalesce(payload, '')
from workflow.run_latest_signals($1::uuid, $2::integer, $3::integer)`, id, maxSignals+1, maxSmallJSON)
	if err != nil {
		return fmt.Errorf("run %s: signals: %w", id, err)
	}
	var sg signalRow
	if _, err := pgx.ForEachRow(rows, []any{&sg.ID, &sg.Name, &sg.CreatedAt, &sg.ConsumedAt, &sg.ConsumedBy, &out}, func() error {
		if len(p.Signals) == maxSignals {
			p.SignalsCut = true
			return nil
		}
		p.Signals = append(p.Signals, sg)
		p.SignalPayloads[sg.ID] = showJSONCut(out, maxSmallJSON)
		return nil
	}); err != nil {
		return fmt.Errorf("run %s: signals: %w", id, err)
	}
	slices.Reverse(p.Signals)
	return nil
}

// showJSONCut is showJSON of JSON text the database may have cut at limit
// bytes: whole, it is indented; cut, it is shown as it is, with a note.
func showJSONCut(text string, limit int) string {
	if utf8.RuneCountInString(text) < limit {
		return showJSON(json.RawMessage(text))
	}
	return text + "\n… (cut; the whole value is in the database)"
}

// showJSON returns stored JSON indented for reading, cut at maxJSON bytes
// (on a character boundary) with a note saying so; "" for none.
func showJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		b.Reset()
		b.Write(raw)
	}
	if b.Len() <= maxJSON {
		return b.String()
	}
	cut := b.Bytes()[:maxJSON]
	for len(cut) > 0 && !utf8.Valid(cut) {
		cut = cut[:len(cut)-1]
	}
	return string(cut) + "\n… (" + strconv.Itoa(b.Len()-len(cut)) + " more bytes not shown)"
}
