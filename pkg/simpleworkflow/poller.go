package simpleworkflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
	// handedBack is set when shutdown gave the run back without waiting for
	// its handler: its outcome has no one to write it.
	handedBack bool
	// parent is set for a run with a DAG run or durable parent: its
	// completion may hand the next run to this worker.
	parent bool
	// log holds what the handler logged until it is sent.
	log runLog
}

// session is the state of one Run call. It owns the handler slots: a run
// takes one when it is claimed (start) and gives it back once its outcome
// is written (freeSlots), so that the runs a worker holds leased never
// exceed its concurrency. Its loops are types of their own, each with its
// own start and stop (loop.go): the claimer (claim.go), the heartbeater
// and the confirmer (heartbeat.go), the reaper (reap.go), the step writer
// (step_writer.go), the log sender (run_log.go) and the completer
// (outcome_write.go).
type session struct {
	eng      *engine.Engine
	pool     *pgxpool.Pool // the inbox's database, for transactional steps
	cfg      PollerConfig
	log      *slog.Logger
	tracer   trace.Tracer
	handlers map[string]HandlerFunc
	prefixes []string
	// types are the handled types: the only ones claimed.
	types []string

	mu     sync.Mutex
	active map[string]*activeRun
	// superseded holds the attempts whose run this worker claimed again
	// after they lost the lease, until their outcome is written.
	superseded map[*activeRun]bool
	// running counts claimed runs whose outcome is not written yet.
	running int

	// gate orders hand-offs (which start runs from the outcome writers)
	// before shutdown: once stopping is set under its write lock, no run
	// is started but by the claimer, which has ended.
	gate     sync.RWMutex
	stopping bool

	// freed wakes the claimer when slots were given back.
	freed     chan struct{}
	handlerWG sync.WaitGroup

	claimer     *claimer
	heartbeater *heartbeater
	confirmer   *confirmer
	reaper      *reaper
	steps       *stepWriter
	logs        *logSender
	completer   *completer
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
		types:      types,
		eng:        p.client.eng,
		pool:       p.client.pool,
		cfg:        p.cfg,
		log:        p.cfg.Logger.With("worker_id", p.cfg.WorkerID),
		tracer:     p.cfg.TracerProvider.Tracer(TracerName),
		handlers:   handlers,
		prefixes:   prefixes,
		active:     map[string]*activeRun{},
		superseded: map[*activeRun]bool{},
		freed:      make(chan struct{}, 1),
	}
	s.claimer = newClaimer(s)
	s.heartbeater = &heartbeater{interval: s.cfg.HeartbeatInterval, held: s.leases, beat: s.heartbeat}
	s.confirmer = newConfirmer(s.runningLeases, s.heartbeat)
	s.reaper = &reaper{eng: s.eng, interval: s.cfg.ReapInterval, log: s.log, reclaimed: s.claimer.wakeUp}
	s.steps = newStepWriter(s.eng, s.cfg.WorkerID, s.cfg.Concurrency)
	s.logs = &logSender{eng: s.eng, workerID: s.cfg.WorkerID, log: s.log, interval: s.cfg.LogFlushInterval,
		running: s.runningRuns}
	s.completer = newCompleter(s, s.cfg.Concurrency)
	return s
}

// signal wakes whoever waits on ch, without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run starts the loops, claims runs until ctx ends, then shuts down.
func (s *session) run(ctx context.Context) error {
	// Background work (listening, heartbeats, writing outcomes) outlives ctx
	// until the shutdown is complete.
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var listening sync.WaitGroup
	defer func() {
		stopBackground()
		listening.Wait()
		// The listener may have re-armed the follow-up wake-up after the
		// claimer stopped: nothing is woken once Run returns.
		s.claimer.followUp.Stop()
	}()

	listening.Go(func() {
		_ = s.eng.Listen(bg, engine.ListenConfig{
			Channels:  []string{engine.ChannelRunCreated, engine.ChannelRunCancelled},
			OnNotify:  s.onNotify,
			OnConnect: s.claimer.wakeUp,
			Logger:    s.log,
		})
	})
	background := []interface {
		Start(context.Context)
		Stop()
	}{s.heartbeater, s.confirmer, s.steps, s.logs}
	if s.cfg.ReapInterval > 0 {
		background = append(background, s.reaper)
	}
	for _, l := range background {
		l.Start(bg)
	}
	defer func() {
		for _, l := range background {
			l.Stop()
		}
	}()
	s.completer.Start(bg)

	s.log.Info("Worker started", "type_prefixes", s.cfg.TypePrefixes, "runtime", s.cfg.Runtime,
		"concurrency", s.cfg.Concurrency, "lease_duration", s.cfg.LeaseDuration)
	s.claimer.Start(ctx)
	<-ctx.Done()
	s.claimer.Stop()
	s.gate.Lock()
	s.stopping = true
	s.gate.Unlock()
	s.shutdown(bg)
	s.completer.Stop()
	s.log.Info("Worker stopped")
	return nil
}

// start gives a claimed run a slot and calls its handler.
func (s *session) start(ctx context.Context, c engine.ClaimedRun) {
	hctx, span := s.startAttemptSpan(context.WithoutCancel(ctx), c)
	hctx, cancel := context.WithCancelCause(hctx)
	a := &activeRun{ref: c.Ref(), typ: c.Type, cancel: cancel, span: span, parent: c.ParentID != ""}
	s.mu.Lock()
	if old := s.active[c.ID]; old != nil {
		// This worker claimed the run again after an earlier attempt of its
		// own lost the lease (reaped while the handler still ran). The older
		// attempt keeps its slot until its outcome is written, is told its
		// lease is gone, and from now on the run's entry is the new attempt.
		old.cancel(ErrLeaseLost)
		s.superseded[old] = true
	}
	s.active[c.ID] = a
	s.running++
	s.mu.Unlock()
	task := &Task{ID: c.ID, Type: c.Type, Payload: c.Payload, Attempt: c.Attempt,
		MaxAttempts: c.MaxAttempts, WorkerID: s.cfg.WorkerID, DeadlineAt: c.DeadlineAt, TraceParent: c.TraceParent}
	task.replay = newReplay(s, a.ref, cancel, span, c.Journal)
	task.replay.active = a
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

// execute calls the handler of a run and queues the outcome to write.
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
	// run back already (its outcome has no one to write it), or the outcome
	// is queued before shutdown looks, and the completer drains it. The
	// queue holds one outcome per slot: the send never blocks.
	s.mu.Lock()
	a.done = true
	if !a.handedBack {
		s.completer.outcomes <- o
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

// freeSlots forgets the runs of a written batch. A slot is free once its
// outcome is written, so that the runs a worker holds leased never exceed
// its concurrency.
func (s *session) freeSlots(batch []outcome) {
	s.mu.Lock()
	for _, o := range batch {
		// Only its own entry: a later attempt of the same run, claimed
		// again by this worker, stays active.
		if s.active[o.run.ref.ID] == o.run {
			delete(s.active, o.run.ref.ID)
		} else {
			delete(s.superseded, o.run)
		}
	}
	s.running -= len(batch)
	s.mu.Unlock()
	signal(s.freed)
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
			a.handedBack = true
			left = append(left, a)
			delete(s.active, id)
			s.running--
		}
	}
	// Attempts that had lost their lease have nothing to hand back; their
	// outcome, if it comes, has no one to write it.
	for a := range s.superseded {
		if !a.done {
			a.handedBack = true
			delete(s.superseded, a)
			s.running--
			endAttemptSpan(a.span, OutcomeLeaseLost, nil, nil)
		}
	}
	s.mu.Unlock()
	if len(left) == 0 {
		// Only attempts that had lost their lease (claimed again since)
		// are still running: there is nothing to hand back.
		return
	}
	refs := make([]engine.LeaseRef, len(left))
	for i, a := range left {
		refs[i] = a.ref
	}
	s.log.Warn("Handlers did not stop after cancellation; handing their runs back", "runs", len(refs))
	released, err := s.releaseRuns(ctx, refs)
	if err != nil {
		s.log.Error("Handing runs back failed; they will be retried after their lease expires", "error", err)
	}
	endReleased(left, released, err)
}
