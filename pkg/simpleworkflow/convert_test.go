package simpleworkflow

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// The SDK declares its own enumerations and limits; they must stay what the
// engine (and the database) uses.
func TestPublicConstantsMatchEngine(t *testing.T) {
	strs := []struct{ sdk, eng string }{
		{string(StatusPending), string(engine.StatusPending)},
		{string(StatusLeased), string(engine.StatusLeased)},
		{string(StatusSucceeded), string(engine.StatusSucceeded)},
		{string(StatusFailed), string(engine.StatusFailed)},
		{string(StatusCancelled), string(engine.StatusCancelled)},
		{string(EventCreated), string(engine.EventCreated)},
		{string(EventLeased), string(engine.EventLeased)},
		{string(EventStarted), string(engine.EventStarted)},
		{string(EventHeartbeat), string(engine.EventHeartbeat)},
		{string(EventSucceeded), string(engine.EventSucceeded)},
		{string(EventFailed), string(engine.EventFailed)},
		{string(EventRetried), string(engine.EventRetried)},
		{string(EventCancelled), string(engine.EventCancelled)},
		{string(EventWaiting), string(engine.EventWaiting)},
		{string(EventWoken), string(engine.EventWoken)},
		{string(EventSignal), string(engine.EventSignalReceived)},
		{string(StepKindStep), string(engine.StepKindStep)},
		{string(StepKindSleep), string(engine.StepKindSleep)},
		{string(StepKindSignal), string(engine.StepKindSignal)},
		{string(StepKindChild), string(engine.StepKindChild)},
		{string(WaitKindLimit), string(engine.WaitKindLimit)},
		{string(StepOutcomeOK), string(engine.OutcomeOK)},
		{string(StepOutcomeError), string(engine.OutcomeError)},
		{string(StepOutcomeTimeout), string(engine.OutcomeTimeout)},
		{DefaultRuntime, engine.RuntimeGo},
	}
	for _, c := range strs {
		if c.sdk != c.eng {
			t.Errorf("SDK constant %q, engine %q", c.sdk, c.eng)
		}
	}
	ints := []struct {
		name     string
		sdk, eng int
	}{
		{"MaxStepNameLength", MaxStepNameLength, engine.MaxStepNameLength},
		{"MaxStepOutputBytes", MaxStepOutputBytes, engine.MaxStepOutputBytes},
		{"MaxSignalPayloadBytes", MaxSignalPayloadBytes, engine.MaxSignalPayloadBytes},
		{"MaxJSONDepth", MaxJSONDepth, engine.MaxJSONDepth},
		{"MaxSteps", MaxSteps, engine.MaxSteps},
		{"MaxCreateMany", MaxCreateMany, engine.MaxCreateMany},
	}
	for _, c := range ints {
		if c.sdk != c.eng {
			t.Errorf("%s: SDK %d, engine %d", c.name, c.sdk, c.eng)
		}
	}
	for _, s := range []Status{StatusPending, StatusLeased, StatusSucceeded, StatusFailed, StatusCancelled} {
		if s.Finished() != engine.Status(s).Finished() {
			t.Errorf("%s: Finished %v, engine says %v", s, s.Finished(), engine.Status(s).Finished())
		}
	}
}

// Every field of the engine's records reaches the SDK's: a field added to
// one side and not converted fails here.
func TestConvertCopiesEveryField(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	later := at.Add(time.Hour)

	w := engine.Wait{Kind: engine.StepKindSignal, Step: "approve", Signal: "approve", Until: &later}
	if got, want := waitFromEngine(&w), (&Wait{Kind: StepKindSignal, Step: "approve", Signal: "approve", Until: &later}); !reflect.DeepEqual(got, want) {
		t.Errorf("wait: got %+v, want %+v", got, want)
	}
	if waitFromEngine(nil) != nil {
		t.Error("a nil wait converts to nil")
	}
	assertSameFields(t, reflect.TypeFor[engine.Wait](), reflect.TypeFor[Wait]())

	e := engine.Event{ID: 7, RunID: "r", Type: engine.EventWoken, Data: json.RawMessage(`{"a":1}`), CreatedAt: at}
	if got, want := eventsFromEngine([]engine.Event{e}), []Event{{ID: 7, RunID: "r", Type: EventWoken, Data: json.RawMessage(`{"a":1}`), CreatedAt: at}}; !reflect.DeepEqual(got, want) {
		t.Errorf("event: got %+v, want %+v", got, want)
	}
	assertSameFields(t, reflect.TypeFor[engine.Event](), reflect.TypeFor[Event]())

	s := engine.Step{Name: "n", Position: 3, Kind: engine.StepKindChild, Outcome: engine.OutcomeError,
		Output: json.RawMessage(`1`), Error: "boom", Attempt: 2, ChildID: "c", WakeAt: &later, StartedAt: at, FinishedAt: &later}
	wantStep := JournalStep{Name: "n", Position: 3, Kind: StepKindChild, Outcome: StepOutcomeError,
		Output: json.RawMessage(`1`), Error: "boom", Attempt: 2, ChildID: "c", WakeAt: &later, StartedAt: at, FinishedAt: &later}
	if got := journalFromEngine([]engine.Step{s}); !reflect.DeepEqual(got, []JournalStep{wantStep}) {
		t.Errorf("step: got %+v, want %+v", got, wantStep)
	}
	assertSameFields(t, reflect.TypeFor[engine.Step](), reflect.TypeFor[JournalStep]())

	if got := statusesToEngine([]Status{StatusFailed, StatusCancelled}); !reflect.DeepEqual(got, []engine.Status{engine.StatusFailed, engine.StatusCancelled}) {
		t.Errorf("statuses: got %v", got)
	}
	if eventsFromEngine(nil) != nil || journalFromEngine(nil) != nil || statusesToEngine(nil) != nil {
		t.Error("nil converts to nil")
	}
	if got := eventsFromEngine([]engine.Event{}); got == nil || len(got) != 0 {
		t.Error("an empty list converts to an empty list")
	}

	r := engine.Run{ID: "id", Type: "t.v1", Payload: json.RawMessage(`{}`), Status: engine.StatusPending, Priority: 5,
		RunAt: at, IdempotencyKey: "k", Attempt: 1, MaxAttempts: 3, LeasedBy: "w", LeaseUntil: &later, LastError: "e",
		Result: json.RawMessage(`2`), StartedAt: &at, FinishedAt: &later, CreatedAt: at, UpdatedAt: later,
		DeadlineAt: &later, ParentID: "p", Wait: &w, TraceParent: "tp"}
	want := &Run{ID: "id", Type: "t.v1", Payload: json.RawMessage(`{}`), Status: StatusPending, Priority: 5,
		RunAt: at, IdempotencyKey: "k", Attempt: 1, MaxAttempts: 3, LeasedBy: "w", LeaseUntil: &later, LastError: "e",
		Result: json.RawMessage(`2`), StartedAt: &at, FinishedAt: &later, CreatedAt: at, UpdatedAt: later,
		DeadlineAt: &later, ParentID: "p", Wait: waitFromEngine(&w), TraceParent: "tp"}
	if got := runFromEngine(r); !reflect.DeepEqual(got, want) {
		t.Errorf("run: got %+v, want %+v", got, want)
	}
}

// assertSameFields checks that two record types have the same field names,
// in the same order.
func assertSameFields(t *testing.T, eng, sdk reflect.Type) {
	t.Helper()
	names := func(typ reflect.Type) []string {
		out := make([]string, typ.NumField())
		for i := range out {
			out[i] = typ.Field(i).Name
		}
		return out
	}
	if a, b := names(eng), names(sdk); !reflect.DeepEqual(a, b) {
		t.Errorf("engine.%s has fields %v, %s has %v", eng.Name(), a, sdk.Name(), b)
	}
}
