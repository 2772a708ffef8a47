package simpleworkflow

import "github.com/simple-workflow/simple-workflow/internal/engine"

// The SDK's types are its own, so that their documentation is the SDK's;
// these functions convert at the boundary with the engine. The enumerations
// are the strings stored in the inbox, so converting them is a cast
// (convert_test.go checks that both sides agree on every value).

func runFromEngine(r engine.Run) *Run {
	return &Run{
		ID: r.ID, Type: r.Type, Payload: r.Payload, Status: Status(r.Status), Priority: r.Priority,
		RunAt: r.RunAt, IdempotencyKey: r.IdempotencyKey, Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		LeasedBy: r.LeasedBy, LeaseUntil: r.LeaseUntil, LastError: r.LastError, Result: r.Result,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		DeadlineAt: r.DeadlineAt, ParentID: r.ParentID, Wait: waitFromEngine(r.Wait), TraceParent: r.TraceParent,
		ConcurrencyKey: r.ConcurrencyKey, Namespace: r.Namespace, TypeNamespace: r.TypeNamespace,
	}
}

func waitFromEngine(w *engine.Wait) *Wait {
	if w == nil {
		return nil
	}
	return &Wait{Kind: StepKind(w.Kind), Step: w.Step, Signal: w.Signal, Until: w.Until}
}

func statusesToEngine(ss []Status) []engine.Status {
	if ss == nil {
		return nil
	}
	out := make([]engine.Status, len(ss))
	for i, s := range ss {
		out[i] = engine.Status(s)
	}
	return out
}

func eventsFromEngine(evs []engine.Event) []Event {
	if evs == nil {
		return nil
	}
	out := make([]Event, len(evs))
	for i, e := range evs {
		out[i] = Event{ID: e.ID, RunID: e.RunID, Type: EventType(e.Type), Data: e.Data, CreatedAt: e.CreatedAt}
	}
	return out
}

func journalFromEngine(steps []engine.Step) []JournalStep {
	if steps == nil {
		return nil
	}
	out := make([]JournalStep, len(steps))
	for i, s := range steps {
		out[i] = JournalStep{
			Name: s.Name, Position: s.Position, Kind: StepKind(s.Kind), Outcome: StepOutcome(s.Outcome),
			Output: s.Output, Error: s.Error, Attempt: s.Attempt, ChildID: s.ChildID,
			WakeAt: s.WakeAt, StartedAt: s.StartedAt, FinishedAt: s.FinishedAt,
		}
	}
	return out
}
