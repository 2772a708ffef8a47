package simpleworkflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Poller claims runs by type prefix and executes them with the handlers
// registered for their types. Register handlers with Handle, then call Run.
type Poller struct {
	client *Client
	cfg    PollerConfig

	mu       sync.Mutex
	handlers map[string]HandlerFunc
	running  bool
}

// NewPoller returns a Poller for client's inbox. The configuration's zero
// values take the documented defaults; an unusable setting is an error
// wrapping ErrInvalid.
func NewPoller(client *Client, cfg PollerConfig) (*Poller, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("poller config: %w", err)
	}
	return &Poller{client: client, cfg: cfg, handlers: map[string]HandlerFunc{}}, nil
}

// Config returns the configuration in effect, defaults filled in.
func (p *Poller) Config() PollerConfig { return p.cfg }

// Handle registers the handler of a workflow type. It must be called before
// Run.
func (p *Poller) Handle(workflowType string, h HandlerFunc) error {
	if err := engine.ValidateType(workflowType); err != nil {
		return fmt.Errorf("handle: %w", err)
	}
	if h == nil {
		return fmt.Errorf("handle %s: %w: nil handler", workflowType, ErrInvalid)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return fmt.Errorf("handle %s: the poller is already running", workflowType)
	}
	p.handlers[workflowType] = h
	return nil
}

// Run claims and executes runs until ctx ends, then shuts down gracefully:
// it stops claiming, lets in-flight handlers finish within the shutdown grace
// period, then cancels the rest with ErrShuttingDown and hands their runs back
// (pending at once, the attempt not counted). It returns nil after a graceful
// shutdown.
func (p *Poller) Run(ctx context.Context) error {
	p.mu.Lock()
	if p.running {
		p.mu.Unlock()
		return errors.New("poller: Run called twice")
	}
	if len(p.handlers) == 0 {
		p.mu.Unlock()
		return fmt.Errorf("poller: %w: no handlers registered (a worker claims only the types it has handlers for)", ErrInvalid)
	}
	p.running = true
	handlers := make(map[string]HandlerFunc, len(p.handlers))
	for k, v := range p.handlers {
		handlers[k] = v
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.running = false
		p.mu.Unlock()
	}()

	s := newSession(p, handlers)
	return s.run(ctx)
}

// activeRun is a claimed run whose outcome is not yet written.
type activeRun struct {
	ref    engine.LeaseRef
	typ    string
	cancel context.CancelCauseFunc
	// span is the attempt's span, ended once its outcome is written.
	span trace.Span
	// done is set once the handler returned.
	done bool
}

type outcomeKind int

const (
	outcomeComplete outcomeKind = iota
	outcomeFail
	outcomeRelease
	outcomeDrop
)

// outcome is what a finished handler asks to record.
type outcome struct {
	run       *activeRun
	kind      outcomeKind
	result    json.RawMessage
	err       error
	retryable bool
	reason    error
}

// session is the state of one Run call.
type session struct {
	eng      *engine.Engine
	cfg      PollerConfig
	log      *slog.Logger
	tracer   trace.Tracer
	handlers map[string]HandlerFunc
	prefixes []string
	// types are the handled types: the only ones claimed.
	types []string

	mu     sync.Mutex
	active map[string]*activeRun
	// running counts claimed runs whose outcome is not written yet.
	running int

	wake chan struct{}
	// followUp wakes the claim loop once more engine.WakeFollowUp after the
	// latest insert notification.
	followUp  *time.Timer
	freed     chan struct{}
	outcomes  chan outcome
	handlerWG sync.WaitGroup

	steps     chan stepRequest
	stepsDone chan struct{}
}

func newSession(p *Poller, handlers map[string]HandlerFunc) *session {
	prefixes := make([]string, len(p.cfg.TypePrefixes))
	for i, pre := range p.cfg.TypePrefixes {
		prefixes[i] = strings.TrimSuffix(pre, "%")
	}
	types := make([]string, 0, len(handlers))
	for t := range handlers {
		types = append(types, t)
	}
	s := &session{
		types:     types,
		eng:       p.client.eng,
		cfg:       p.cfg,
		log:       p.cfg.Logger.With("worker_id", p.cfg.WorkerID),
		tracer:    p.cfg.TracerProvider.Tracer(TracerName),
		handlers:  handlers,
		prefixes:  prefixes,
		active:    map[string]*activeRun{},
		wake:      make(chan struct{}, 1),
		freed:     make(chan struct{}, 1),
		outcomes:  make(chan outcome, p.cfg.Concurrency),
		steps:     make(chan stepRequest, p.cfg.Concurrency),
		stepsDone: make(chan struct{}),
	}
	s.followUp = time.AfterFunc(time.Hour, func() { signal(s.wake) })
	s.followUp.Stop()
	return s
}

// wakeFollowUp is engine.WakeFollowUp, as a variable for tests.
var wakeFollowUp atomic.Int64

func init() { wakeFollowUp.Store(int64(engine.WakeFollowUp)) }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// matches reports whether a workflow type is one this worker claims.
func (s *session) matches(workflowType string) bool {
	if len(s.prefixes) == 0 {
		return true
	}
	for _, p := range s.prefixes {
		if strings.HasPrefix(workflowType, p) {
			return true
		}
	}
	return false
}

func (s *session) run(ctx context.Context) error {
	// Background work (listening, heartbeats, writing outcomes) outlives ctx
	// until the shutdown is complete.
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var bgWG sync.WaitGroup
	defer func() {
		stopBackground()
		bgWG.Wait()
		s.followUp.Stop()
	}()

	bgWG.Go(func() {
		_ = s.eng.Listen(bg, engine.ListenConfig{
			Channels:  []string{engine.ChannelRunCreated, engine.ChannelRunCancelled},
			OnNotify:  s.onNotify,
			OnConnect: func() { signal(s.wake) },
			Logger:    s.log,
		})
	})
	bgWG.Go(func() { s.heartbeatLoop(bg) })
	bgWG.Go(func() { s.stepLoop(bg) })
	if s.cfg.ReapInterval > 0 {
		bgWG.Go(func() { s.reapLoop(bg) })
	}
	stopCompleter := make(chan struct{})
	completerDone := make(chan struct{})
	go func() {
		defer close(completerDone)
		s.completeLoop(bg, stopCompleter)
	}()

	s.log.Info("Worker started", "type_prefixes", s.cfg.TypePrefixes, "runtime", s.cfg.Runtime,
		"concurrency", s.cfg.Concurrency, "lease_duration", s.cfg.LeaseDuration)
	s.claimLoop(ctx)
	s.shutdown(bg)
	close(stopCompleter)
	<-completerDone
	s.log.Info("Worker stopped")
	return nil
}

func (s *session) onNotify(n engine.Notification) {
	switch n.Channel {
	case engine.ChannelRunCreated:
		if s.matches(n.Payload) {
			signal(s.wake)
			s.followUp.Reset(time.Duration(wakeFollowUp.Load()))
		}
	case engine.ChannelRunCancelled:
		s.mu.Lock()
		a := s.active[n.Payload]
		s.mu.Unlock()
		if a != nil {
			a.cancel(ErrRunCancelled)
		}
	}
}

func (s *session) claimLoop(ctx context.Context) {
	timer := time.NewTimer(s.cfg.PollInterval)
	defer timer.Stop()
	wait := func(chs ...chan struct{}) {
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(s.cfg.PollInterval)
		var extra chan struct{}
		if len(chs) > 0 {
			extra = chs[0]
		}
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-extra:
		case <-timer.C:
		}
	}
	batchWait := false
	for ctx.Err() == nil {
		s.mu.Lock()
		free, running := s.cfg.Concurrency-s.running, s.running
		s.mu.Unlock()
		if free <= 0 {
			select {
			case <-ctx.Done():
			case <-s.freed:
			}
			continue
		}
		// While handlers are busy, give a few milliseconds for a worthwhile
		// batch of slots to free up rather than claiming one run per round
		// trip; slow handlers do not hold free slots idle for longer.
		if running > 0 && free < s.minClaim() && !batchWait {
			batchWait = true
			select {
			case <-ctx.Done():
			case <-s.freed:
			case <-time.After(claimBatchWait):
			}
			continue
		}
		batchWait = false
		limit := min(free, s.cfg.ClaimBatchSize)
		// A claim is never cut off by shutdown: once the server has leased
		// runs, they are started (and finish within the grace period) rather
		// than left leased until their lease expires.
		cctx, cancelClaim := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
		claimed, err := s.eng.ClaimRuns(cctx, engine.ClaimParams{
			WorkerID: s.cfg.WorkerID, TypePrefixes: s.cfg.TypePrefixes, Runtime: s.cfg.Runtime,
			Limit: limit, LeaseDuration: s.cfg.LeaseDuration, Types: s.types,
		})
		cancelClaim()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Error("Claim failed; retrying", "error", err)
			wait()
			continue
		}
		for _, c := range claimed {
			s.start(ctx, c)
		}
		if len(claimed) == limit {
			continue // there may be more runnable runs
		}
		wait()
	}
}

// claimTimeout bounds one claim call.
const claimTimeout = 30 * time.Second

// claimBatchWait is how long a busy worker waits for more free slots before
// claiming into the few it has.
const claimBatchWait = 5 * time.Millisecond

// minClaim is the fewest free slots worth a claim while handlers are busy: a
// quarter of the claim batch size (bounded by the concurrency), at least one.
func (s *session) minClaim() int {
	return max(1, min(s.cfg.Concurrency, s.cfg.ClaimBatchSize)/4)
}

func (s *session) start(ctx context.Context, c engine.ClaimedRun) {
	hctx, span := s.startAttemptSpan(context.WithoutCancel(ctx), c)
	hctx, cancel := context.WithCancelCause(hctx)
	a := &activeRun{ref: c.Ref(), typ: c.Type, cancel: cancel, span: span}
	s.mu.Lock()
	s.active[c.ID] = a
	s.running++
	s.mu.Unlock()
	task := &Task{ID: c.ID, Type: c.Type, Payload: c.Payload, Attempt: c.Attempt,
		MaxAttempts: c.MaxAttempts, WorkerID: s.cfg.WorkerID, DeadlineAt: c.DeadlineAt, TraceParent: c.TraceParent}
	task.replay = newReplay(s, a.ref, cancel, span, c.Journal)
	task.decodeErr = c.DecodeError
	if len(c.Journal) > 0 {
		s.log.Info("Run resumed", "run_id", c.ID, "type", c.Type, "attempt", c.Attempt, "journal", len(c.Journal))
	} else {
		s.log.Info("Run started", "run_id", c.ID, "type", c.Type, "attempt", c.Attempt)
	}
	s.handlerWG.Add(1)
	go func() {
		defer s.handlerWG.Done()
		s.execute(hctx, a, task)
	}()
}

func (s *session) execute(ctx context.Context, a *activeRun, task *Task) {
	var result json.RawMessage
	var err error
	if task.decodeErr != nil {
		// What earlier attempts recorded cannot be read back, so the run
		// cannot be replayed: it fails alone, for good.
		err = Permanent(task.decodeErr)
	} else if h := s.handlers[task.Type]; h == nil {
		err = fmt.Errorf("worker %s has no handler for workflow type %s", s.cfg.WorkerID, task.Type)
	} else {
		result, err = callHandler(ctx, h, task)
	}
	cause := context.Cause(ctx)
	a.cancel(nil)
	parked, failure := task.replay.state()

	o := outcome{run: a, reason: cause}
	switch {
	case parked:
		o.kind, o.reason = outcomeDrop, ErrParked
	case errors.Is(cause, ErrRunCancelled), errors.Is(cause, ErrLeaseLost), errors.Is(cause, ErrDeadlineExceeded):
		o.kind = outcomeDrop
	case failure != nil:
		o.kind, o.err, o.retryable = outcomeFail, failure, false
	case errors.Is(cause, ErrShuttingDown) && (err != nil || !json.Valid(orNull(result))):
		o.kind = outcomeRelease
	case err == nil && len(result) > 0 && !json.Valid(result):
		o.kind, o.err = outcomeFail, fmt.Errorf("handler returned a result that is not valid JSON")
	case err == nil:
		o.kind, o.result = outcomeComplete, result
	default:
		o.kind, o.err, o.retryable = outcomeFail, err, !IsPermanent(err)
	}

	// Sent under the lock shutdown scans with: either shutdown handed the
	// run back already (it is no longer active, and its outcome has no one
	// to write it), or the outcome is queued before shutdown looks, and the
	// completer drains it. The queue holds one outcome per slot: the send
	// never blocks.
	s.mu.Lock()
	a.done = true
	if s.active[a.ref.ID] != nil {
		s.outcomes <- o
	}
	s.mu.Unlock()
}

// orNull returns raw, or JSON null when it is empty.
func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// completeLoop writes outcomes in batches: whatever accumulated while the
// previous batch was being written goes in the next one.
func (s *session) completeLoop(ctx context.Context, stop chan struct{}) {
	const maxBatch = 1000
	for {
		var batch []outcome
		select {
		case o := <-s.outcomes:
			batch = append(batch, o)
		case <-stop:
			for {
				select {
				case o := <-s.outcomes:
					batch = append(batch, o)
					continue
				default:
				}
				break
			}
			if len(batch) > 0 {
				s.flush(ctx, batch)
			}
			return
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case o := <-s.outcomes:
				batch = append(batch, o)
			default:
				break drain
			}
		}
		s.flush(ctx, batch)
	}
}

// flush records a batch of outcomes and forgets their runs.
func (s *session) flush(ctx context.Context, batch []outcome) {
	var (
		completions []engine.Completion
		failures    []engine.Failure
		releases    []engine.LeaseRef
	)
	// How each attempt ended, for its span; the default covers an outcome
	// whose write failed.
	ends := make(map[string]attemptEnd, len(batch))
	for _, o := range batch {
		ends[o.run.ref.ID] = attemptEnd{outcome: OutcomeUnrecorded, err: o.err}
		switch o.kind {
		case outcomeComplete:
			completions = append(completions, engine.Completion{LeaseRef: o.run.ref, Result: o.result})
		case outcomeFail:
			failures = append(failures, engine.Failure{LeaseRef: o.run.ref, Error: o.err.Error(), Retryable: o.retryable})
		case outcomeRelease:
			releases = append(releases, o.run.ref)
		case outcomeDrop:
			ends[o.run.ref.ID] = attemptEnd{outcome: dropOutcome(o.reason)}
			if errors.Is(o.reason, ErrParked) {
				s.log.Info("Run parked", "run_id", o.run.ref.ID, "type", o.run.typ, "attempt", o.run.ref.Attempt)
				continue
			}
			s.log.Info("Run stopped", "run_id", o.run.ref.ID, "type", o.run.typ, "attempt", o.run.ref.Attempt, "reason", o.reason)
		}
	}
	byID := make(map[string]outcome, len(batch))
	for _, o := range batch {
		byID[o.run.ref.ID] = o
	}
	if len(completions) > 0 {
		done, unstorable, err := s.writeCompletions(ctx, completions)
		for _, f := range unstorable {
			o := byID[f.ID]
			o.kind, o.err, o.retryable = outcomeFail, errors.New(f.Error), false
			byID[f.ID] = o
			ends[f.ID] = attemptEnd{outcome: OutcomeUnrecorded, err: o.err}
			failures = append(failures, f)
		}
		if err != nil {
			s.log.Error("Recording results failed; the runs will be retried after their lease expires", "error", err, "runs", len(completions))
		}
		ok := make(map[string]bool, len(done))
		for _, d := range done {
			ok[d.ID] = true
			o := byID[d.ID]
			if d.Status == engine.StatusFailed {
				// The database refused the result (too large, nested too
				// deeply): the run failed alone, for good.
				ends[d.ID] = attemptEnd{outcome: OutcomeFailed, err: errors.New(d.Error)}
				s.log.Info("Run failed", "run_id", d.ID, "type", o.run.typ, "attempt", o.run.ref.Attempt, "error", d.Error)
				continue
			}
			ends[d.ID] = attemptEnd{outcome: OutcomeSucceeded}
			s.log.Info("Run succeeded", "run_id", d.ID, "type", o.run.typ, "attempt", o.run.ref.Attempt)
		}
		for _, c := range completions {
			if !ok[c.ID] && err == nil && byID[c.ID].kind == outcomeComplete {
				ends[c.ID] = attemptEnd{outcome: OutcomeLeaseLost}
				s.log.Warn("Run result discarded: the lease was no longer held", "run_id", c.ID, "attempt", c.Attempt)
			}
		}
	}
	if len(failures) > 0 {
		res, err := s.writeFailures(ctx, failures)
		if err != nil {
			s.log.Error("Recording failures failed; the runs will be retried after their lease expires", "error", err, "runs", len(failures))
		}
		if err == nil {
			// Written, but not for the runs whose lease had gone.
			for _, f := range failures {
				ends[f.ID] = attemptEnd{outcome: OutcomeLeaseLost}
			}
		}
		for _, r := range res {
			o := byID[r.ID]
			if r.Status == engine.StatusPending {
				next := r.RunAt
				ends[r.ID] = attemptEnd{outcome: OutcomeRetrying, err: o.err, next: &next}
				s.log.Info("Run failed; retrying", "run_id", r.ID, "type", o.run.typ, "attempt", o.run.ref.Attempt,
					"error", o.err.Error(), "next_attempt_at", r.RunAt)
			} else {
				ends[r.ID] = attemptEnd{outcome: OutcomeFailed, err: o.err}
				s.log.Info("Run failed", "run_id", r.ID, "type", o.run.typ, "attempt", o.run.ref.Attempt, "error", o.err.Error())
			}
		}
	}
	if len(releases) > 0 {
		done, err := withRetry(ctx, func(ctx context.Context) ([]string, error) {
			return s.eng.ReleaseRuns(ctx, s.cfg.WorkerID, releases)
		})
		if err != nil {
			s.log.Error("Handing runs back failed; they will be retried after their lease expires", "error", err, "runs", len(releases))
		} else {
			for _, r := range releases { // written, but not for lost leases
				ends[r.ID] = attemptEnd{outcome: OutcomeLeaseLost}
			}
		}
		for _, id := range done {
			ends[id] = attemptEnd{outcome: OutcomeReleased}
			s.log.Info("Run handed back", "run_id", id, "type", byID[id].run.typ, "reason", "worker shutting down")
		}
	}
	for _, o := range batch {
		e := ends[o.run.ref.ID]
		endAttemptSpan(o.run.span, e.outcome, e.err, e.next)
	}
	// A slot is free once its outcome is written, so that the runs a worker
	// holds leased never exceed its concurrency.
	s.mu.Lock()
	for _, o := range batch {
		delete(s.active, o.run.ref.ID)
	}
	s.running -= len(batch)
	s.mu.Unlock()
	signal(s.freed)
}

// withRetry calls f until it succeeds, ctx ends, five attempts failed, or f
// reports invalid input (which a retry cannot fix).
func withRetry[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	var (
		out T
		err error
	)
	delay := 100 * time.Millisecond
	for i := range 5 {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err = f(cctx)
		cancel()
		if err == nil || ctx.Err() != nil || i == 4 || errors.Is(err, ErrInvalid) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, err
		case <-time.After(delay):
		}
		delay *= 2
	}
	return out, err
}

// heartbeatLoop extends the leases of every active run, and cancels the
// handlers of runs that were cancelled or whose lease was lost.
func (s *session) heartbeatLoop(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.HeartbeatInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		s.mu.Lock()
		refs := make([]engine.LeaseRef, 0, len(s.active))
		for _, a := range s.active {
			refs = append(refs, a.ref)
		}
		s.mu.Unlock()
		if len(refs) == 0 {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, s.cfg.HeartbeatInterval)
		res, err := s.eng.HeartbeatRuns(hctx, s.cfg.WorkerID, refs, s.cfg.LeaseDuration)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("Heartbeat failed", "error", err, "runs", len(refs))
			}
			continue
		}
		for _, r := range res {
			if r.Owned {
				continue
			}
			s.mu.Lock()
			a := s.active[r.ID]
			s.mu.Unlock()
			if a == nil {
				continue
			}
			switch {
			case r.Status == engine.StatusCancelled:
				a.cancel(ErrRunCancelled)
			case r.DeadlineExceeded:
				a.cancel(ErrDeadlineExceeded)
			default:
				a.cancel(ErrLeaseLost)
			}
		}
	}
}

// reapLoop returns runs whose lease expired to the queue.
func (s *session) reapLoop(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.ReapInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		res, err := s.eng.ReapExpiredLeases(ctx, 500)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("Reaping expired leases failed", "error", err)
			}
			continue
		}
		for _, r := range res {
			s.log.Info("Lease expired; run reclaimed", "run_id", r.ID, "status", r.Status)
		}
		if len(res) > 0 {
			signal(s.wake)
		}
		expired, err := s.eng.ExpireDeadlines(ctx, 500)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("Expiring deadlines failed", "error", err)
			}
			continue
		}
		if len(expired) > 0 {
			// One line a batch: a flood of overdue runs is not a flood of logs.
			s.log.Info("Runs failed: deadline exceeded", "runs", len(expired), "run_ids", firstIDs(expired, 10))
		}
	}
}

// shutdown waits for in-flight handlers within the grace period, then cancels
// the rest and hands their runs back.
func (s *session) shutdown(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		s.handlerWG.Wait()
		close(done)
	}()
	s.mu.Lock()
	n := s.running
	s.mu.Unlock()
	if n > 0 {
		s.log.Info("Stopping: waiting for in-flight runs", "runs", n, "grace_period", s.cfg.ShutdownGracePeriod)
	}
	grace := time.NewTimer(s.cfg.ShutdownGracePeriod)
	defer grace.Stop()
	select {
	case <-done:
		return
	case <-grace.C:
	}
	s.mu.Lock()
	for _, a := range s.active {
		if !a.done {
			a.cancel(ErrShuttingDown)
		}
	}
	s.mu.Unlock()
	// Handlers that honour their context return at once; give them a moment.
	select {
	case <-done:
		return
	case <-time.After(min(5*time.Second, s.cfg.ShutdownGracePeriod+time.Second)):
	}
	// Some handlers ignore cancellation: hand their runs back regardless;
	// whatever they write later is refused by the lease guard.
	var left []*activeRun
	s.mu.Lock()
	for id, a := range s.active {
		if !a.done {
			left = append(left, a)
			delete(s.active, id)
			s.running--
		}
	}
	s.mu.Unlock()
	refs := make([]engine.LeaseRef, len(left))
	for i, a := range left {
		refs[i] = a.ref
	}
	s.log.Warn("Handlers did not stop after cancellation; handing their runs back", "runs", len(refs))
	released, err := withRetry(ctx, func(ctx context.Context) ([]string, error) {
		return s.eng.ReleaseRuns(ctx, s.cfg.WorkerID, refs)
	})
	if err != nil {
		s.log.Error("Handing runs back failed; they will be retried after their lease expires", "error", err)
	}
	endReleased(left, released, err)
}

// firstIDs returns at most n of ids, for a log line about a batch.
func firstIDs(ids []string, n int) []string {
	if len(ids) > n {
		return ids[:n]
	}
	return ids
}
