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
	maxSignals  = 200
	maxChildren = 200
	maxJSON     = 64 << 10
)

// eventRow is one entry of a run's audit trail.
type eventRow struct {
	ID        int64
	Type      string
	Data      string
	CreatedAt time.Time
}

// attemptRow is one attempt of a run, read from its audit trail.
type attemptRow struct {
	Attempt  int
	Worker   string
	Started  time.Time
	Ended    *time.Time
	Outcome  string
	Error    string
	sawFirst bool
}

// runPage is what a run's page shows.
type runPage struct {
	Run            engine.Run
	Payload        string
	Result         string
	Events         []eventRow
	EventsCut      bool
	Attempts       []attemptRow
	Steps          []engine.Step
	Signals        []engine.Signal
	SignalsCut     bool
	Children       []engine.ChildRun
	ChildrenCut    bool
	DAG            *dagGraph
	Now            time.Time
	Finished       bool
	StepOutputs    map[int]string
	SignalPayloads map[int64]string
}

// errNoRun is returned for a run that does not exist.
var errNoRun = errors.New("no such run")

// loadRun reads everything a run's page shows.
func (s *Server) loadRun(ctx context.Context, id string) (runPage, error) {
	p := runPage{Now: time.Now(), StepOutputs: map[int]string{}, SignalPayloads: map[int64]string{}}
	run, err := s.engine.GetRun(ctx, id)
	if errors.Is(err, engine.ErrNotFound) {
		return p, errNoRun
	}
	if err != nil {
		return p, fmt.Errorf("run %s: %w", id, err)
	}
	p.Run, p.Finished = run, run.Status.Finished()
	p.Payload, p.Result = showJSON(run.Payload), showJSON(run.Result)

	rows, err := s.db.Query(ctx, `
select e.id, e.event_type, e.data::text, e.created_at
from workflow.workflow_event e
where e.workflow_id = $1
order by e.id desc
limit $2`, id, maxEvents+1)
	if err != nil {
		return p, fmt.Errorf("run %s: events: %w", id, err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (eventRow, error) {
		var e eventRow
		err := row.Scan(&e.ID, &e.Type, &e.Data, &e.CreatedAt)
		e.Data = showJSON(json.RawMessage(e.Data))
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
	p.Attempts = attemptsOf(events)

	if p.Steps, err = s.engine.ListSteps(ctx, id); err != nil {
		return p, fmt.Errorf("run %s: %w", id, err)
	}
	for _, st := range p.Steps {
		p.StepOutputs[st.Position] = showJSON(st.Output)
	}
	if p.Signals, err = s.engine.ListSignals(ctx, id); err != nil {
		return p, fmt.Errorf("run %s: %w", id, err)
	}
	if len(p.Signals) > maxSignals {
		p.Signals, p.SignalsCut = p.Signals[len(p.Signals)-maxSignals:], true
	}
	for _, sg := range p.Signals {
		p.SignalPayloads[sg.ID] = showJSON(sg.Payload)
	}
	if p.Children, err = s.engine.ListChildren(ctx, id, maxChildren+1); err != nil {
		return p, fmt.Errorf("run %s: %w", id, err)
	}
	if len(p.Children) > maxChildren {
		p.Children, p.ChildrenCut = p.Children[:maxChildren], true
	}
	steps, err := s.engine.DAGSteps(ctx, id)
	if err != nil {
		return p, fmt.Errorf("run %s: %w", id, err)
	}
	if len(steps) > 0 {
		p.DAG = layoutDAG(steps)
	}
	return p, nil
}

// attemptsOf reads the attempts of a run from its audit trail: the events
// that name an attempt, grouped by it.
func attemptsOf(events []eventRow) []attemptRow {
	var out []attemptRow
	index := map[int]int{}
	for _, e := range events {
		var d struct {
			Attempt  *int   `json:"attempt"`
			WorkerID string `json:"worker_id"`
			Error    string `json:"error"`
		}
		if json.Unmarshal([]byte(e.Data), &d) != nil || d.Attempt == nil || *d.Attempt < 1 {
			continue
		}
		i, ok := index[*d.Attempt]
		if !ok {
			out = append(out, attemptRow{Attempt: *d.Attempt, Started: e.CreatedAt})
			i = len(out) - 1
			index[*d.Attempt] = i
		}
		a := &out[i]
		if d.WorkerID != "" {
			a.Worker = d.WorkerID
		}
		switch e.Type {
		case "succeeded", "failed", "retried", "cancelled":
			at := e.CreatedAt
			a.Ended, a.Outcome = &at, e.Type
			if d.Error != "" {
				a.Error = d.Error
			}
		}
	}
	return out
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
