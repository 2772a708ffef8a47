package simpleworkflow

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// replay is the durable state of one attempt: the journal loaded at claim,
// the position the handler's code has reached in it, and what the attempt
// decided about itself (parked, or failed by non-determinism).
type replay struct {
	s      *session
	ref    engine.LeaseRef
	cancel context.CancelCauseFunc
	// span is the attempt's span: the parent of step and wait spans.
	span trace.Span
	// active is the attempt's slot, whose log a wait sends before it
	// ends the lease (nil in tests that make a replay alone).
	active *activeRun

	mu     sync.Mutex
	byPos  map[int]engine.JournalEntry
	byName map[string]engine.JournalEntry
	next   int
	// replayUntil is one past the last position of the journal the
	// attempt began with (0 for none).
	replayUntil int
	signals     map[string]int
	parked      bool
	// failure is set when the run must fail for good whatever the handler
	// returns (non-determinism).
	failure error
}

func newReplay(s *session, ref engine.LeaseRef, cancel context.CancelCauseFunc, span trace.Span, journal []engine.JournalEntry) *replay {
	// Most runs record nothing: the maps are made on first use.
	r := &replay{s: s, ref: ref, cancel: cancel, span: span}
	for _, e := range journal {
		r.rememberLocked(e)
		r.replayUntil = max(r.replayUntil, e.Position+1)
	}
	return r
}

// replaying reports whether the handler is still before the last step its
// journal held when the attempt began: code it runs again, not anew.
func (r *replay) replaying() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next < r.replayUntil
}

// nondeterminismMessage says what the journal expected at a position and what
// the code reached instead, in the words of workflow.nondeterminism_message.
func nondeterminismMessage(want engine.JournalEntry, pos int, kind engine.StepKind, name string) string {
	got := strconv.Quote(name)
	if want.Kind != kind {
		got = string(kind) + " " + got
	}
	return fmt.Sprintf("non-deterministic: expected %s %q at position %d, got %s", want.Kind, want.Name, pos, got)
}

// reach takes the next position for step name of the given kind. found is
// true when the journal has that step there (done or, for waits, still
// open); a different step there is non-determinism.
func (r *replay) reach(name string, kind engine.StepKind) (int, engine.JournalEntry, bool, error) {
	if err := engine.ValidateStepName(name); err != nil {
		return 0, engine.JournalEntry{}, false, Permanent(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.stoppedLocked(); err != nil {
		return 0, engine.JournalEntry{}, false, err
	}
	pos := r.next
	if pos >= engine.MaxSteps {
		return 0, engine.JournalEntry{}, false, Permanent(fmt.Errorf("%w: a run has at most %d steps", ErrInvalid, engine.MaxSteps))
	}
	r.next++
	if e, ok := r.byPos[pos]; ok {
		if e.Name != name || e.Kind != kind {
			return 0, engine.JournalEntry{}, false, r.failLocked(nondeterminismMessage(e, pos, kind, name))
		}
		return pos, e, true, nil
	}
	if e, ok := r.byName[name]; ok {
		return 0, engine.JournalEntry{}, false, r.failLocked(fmt.Sprintf(
			"non-deterministic: step %q is recorded at position %d, reached again at position %d", name, e.Position, pos))
	}
	return pos, engine.JournalEntry{}, false, nil
}

// stoppedLocked is the error for any durable call after the attempt parked
// or failed.
func (r *replay) stoppedLocked() error {
	if r.failure != nil {
		return r.failure
	}
	if r.parked {
		return ErrParked
	}
	return nil
}

// fail marks the attempt as failed for good by non-determinism.
func (r *replay) fail(message string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failLocked(message)
}

func (r *replay) failLocked(message string) error {
	if r.failure == nil {
		r.failure = Permanent(fmt.Errorf("%w%s", ErrNonDeterministic, trimPrefix(message, "non-deterministic")))
	}
	return r.failure
}

func trimPrefix(s, p string) string {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return ": " + s
}

// remember adds an entry learnt during this attempt.
func (r *replay) remember(e engine.JournalEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rememberLocked(e)
}

func (r *replay) rememberLocked(e engine.JournalEntry) {
	if r.byPos == nil {
		r.byPos, r.byName = map[int]engine.JournalEntry{}, map[string]engine.JournalEntry{}
	}
	r.byPos[e.Position] = e
	r.byName[e.Name] = e
}

// lookup returns the entry of a step by name.
func (r *replay) lookup(name string) (engine.JournalEntry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.byName[name]
	return e, ok
}

// signalStep names the journal entry of the next wait for signal name: the
// name itself the first time in an execution, then name:2, name:3, …
func (r *replay) signalStep(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.signals == nil {
		r.signals = map[string]int{}
	}
	r.signals[name]++
	if n := r.signals[name]; n > 1 {
		return name + ":" + strconv.Itoa(n)
	}
	return name
}

// markParked records that the run parked: the handler must stop.
func (r *replay) markParked(wakeAt *time.Time) {
	r.mu.Lock()
	r.parked = true
	r.mu.Unlock()
	r.cancel(ErrParked)
	if wakeAt != nil {
		r.s.claimer.wakeAt(*wakeAt)
	}
}

// state reports what the attempt decided about itself.
func (r *replay) state() (parked bool, failure error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.parked, r.failure
}
