package simpleworkflow

import (
	"context"
	"encoding/json"
	"time"
)

// StepKind is what a journal entry records: a step, a sleep, a signal wait
// or a child run. The values are the strings stored in the journal.
type StepKind string

// The kinds of journal entries.
const (
	// StepKindStep is a Step: a function whose output is journaled.
	StepKindStep StepKind = "step"
	// StepKindSleep is a Sleep or SleepUntil.
	StepKindSleep StepKind = "sleep"
	// StepKindSignal is a WaitForSignal.
	StepKindSignal StepKind = "signal"
	// StepKindChild is a child run started with StartChild (and awaited
	// with AwaitChild).
	StepKindChild StepKind = "child"
)

// WaitKindLimit is the Wait.Kind of a run its type's flow limits hold back
// (a full concurrency key, a rate window used up); never a journal entry's.
const WaitKindLimit StepKind = "limit"

// StepOutcome is how a journal entry ended; empty while a wait is open or a
// child runs. The values are the strings stored in the journal.
type StepOutcome string

// The outcomes of journal entries.
const (
	// StepOutcomeOK is a step that succeeded, a sleep that ended, a signal
	// received or a child that succeeded.
	StepOutcomeOK StepOutcome = "ok"
	// StepOutcomeError is a child that failed or was cancelled.
	StepOutcomeError StepOutcome = "error"
	// StepOutcomeTimeout is a signal wait whose timeout passed first.
	StepOutcomeTimeout StepOutcome = "timeout"
)

// JournalStep is one entry of a run's journal: a step, sleep, signal wait or
// child run its code reached. Later attempts replay it instead of doing it
// again.
type JournalStep struct {
	// Name is the name the code gave it. The second and later waits for
	// the same signal in one execution are named signal:2, signal:3, ...
	Name string
	// Position is its place in the order the code reached the entries,
	// from 0.
	Position int
	// Kind says what it is.
	Kind StepKind
	// Outcome is how it ended; empty while it is open.
	Outcome StepOutcome
	// Output is the step's JSON output, the signal's payload or the child's
	// result (nil for none).
	Output json.RawMessage
	// Error is a failed or cancelled child's error ("" for none).
	Error string
	// Attempt is the attempt of the run that reached it.
	Attempt int
	// ChildID is the child run of a StepKindChild entry ("" otherwise).
	ChildID string
	// WakeAt is when a sleep ends or a signal wait times out; nil for none.
	WakeAt *time.Time
	// StartedAt is when it was reached.
	StartedAt time.Time
	// FinishedAt is when its outcome was recorded; nil while it is open.
	FinishedAt *time.Time
}

// Steps returns a run's journal in the order its code reached the steps.
func (c *Client) Steps(ctx context.Context, runID string) ([]JournalStep, error) {
	steps, err := c.eng.ListSteps(ctx, runID)
	if err != nil {
		return nil, err
	}
	return journalFromEngine(steps), nil
}
