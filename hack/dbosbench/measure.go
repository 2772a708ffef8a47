package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// Names the workflows and the step are registered and recorded under.
const (
	stepsName  = "bench.steps"
	chainName  = "bench.chain"
	fanoutName = "bench.fanout"
	childName  = "bench.child"
	pickupName = "bench.pickup"
	noopName   = "bench.noop"
	queueName  = "bench"
)

// timeout bounds every measurement.
const timeout = 10 * time.Minute

// bench holds what the workflow functions share with the measurements: DBOS
// calls them by their registered names, so they reach it through state.
type bench struct {
	ctx   dbos.Context
	cfg   config
	queue dbos.Queue

	finished atomic.Int64 // top-level workflows whose function returned without error

	mu        sync.Mutex
	chainEnds map[string][]time.Time // per chain parent: its start, then each child's end as it saw it

	started chan pickupStart // pickup workflows' starts
}

type pickupStart struct {
	i  int
	at time.Time
}

var state *bench

// newBench registers the workflows and the queue; each measurement launches
// DBOS (b.launch) when it is ready for the queue runner to start.
func newBench(ctx dbos.Context, cfg config) (*bench, error) {
	b := &bench{ctx: ctx, cfg: cfg, chainEnds: map[string][]time.Time{}, started: make(chan pickupStart, cfg.samples)}
	state = b
	dbos.RegisterWorkflow(ctx, stepsWorkflow, dbos.WithWorkflowName(stepsName))
	dbos.RegisterWorkflow(ctx, chainWorkflow, dbos.WithWorkflowName(chainName))
	dbos.RegisterWorkflow(ctx, fanoutWorkflow, dbos.WithWorkflowName(fanoutName))
	dbos.RegisterWorkflow(ctx, childWorkflow, dbos.WithWorkflowName(childName))
	dbos.RegisterWorkflow(ctx, pickupWorkflow, dbos.WithWorkflowName(pickupName))
	q, err := dbos.RegisterQueue(ctx, queueName,
		dbos.WithWorkerConcurrency(cfg.concurrency),
		dbos.WithQueueBasePollingInterval(cfg.queuePoll))
	if err != nil {
		return nil, fmt.Errorf("register queue: %w", err)
	}
	b.queue = q
	return b, nil
}

// launch starts DBOS's runtime: recovery, then the queue runner.
func (b *bench) launch() error {
	if err := dbos.Launch(b.ctx); err != nil {
		return fmt.Errorf("launch dbos: %w", err)
	}
	return nil
}

func noopStep(context.Context) (int, error) { return 0, nil }

// stepsWorkflow runs steps no-op steps and returns how many it ran.
func stepsWorkflow(ctx dbos.Context, steps int) (int, error) {
	for i := range steps {
		if _, err := dbos.RunAsStep(ctx, noopStep, dbos.WithStepName(noopName)); err != nil {
			return i, err
		}
	}
	state.finished.Add(1)
	return steps, nil
}

// childWorkflow does nothing but return its input.
func childWorkflow(_ dbos.Context, i int) (int, error) { return i, nil }

// chainWorkflow runs length children one after the other, each enqueued once
// the previous one's result is in, and returns how many it ran.
func chainWorkflow(ctx dbos.Context, length int) (int, error) {
	id, err := dbos.GetWorkflowID(ctx)
	if err != nil {
		return 0, err
	}
	ends := make([]time.Time, 0, length+1)
	ends = append(ends, time.Now())
	for i := range length {
		h, err := dbos.RunWorkflow(ctx, childWorkflow, i, dbos.WithQueue(state.queue))
		if err != nil {
			return i, fmt.Errorf("enqueue child %d: %w", i, err)
		}
		got, err := h.GetResult(dbos.WithHandlePollingInterval(state.cfg.resultPoll))
		if err != nil {
			return i, fmt.Errorf("child %d: %w", i, err)
		}
		if got != i {
			return i, fmt.Errorf("child %d returned %d", i, got)
		}
		ends = append(ends, time.Now())
	}
	state.mu.Lock()
	state.chainEnds[id] = ends
	state.mu.Unlock()
	state.finished.Add(1)
	return length, nil
}

// fanoutWorkflow enqueues width children in a row, then awaits them all, and
// returns how many succeeded.
func fanoutWorkflow(ctx dbos.Context, width int) (int, error) {
	handles := make([]dbos.WorkflowHandle[int], width)
	for i := range handles {
		h, err := dbos.RunWorkflow(ctx, childWorkflow, i, dbos.WithQueue(state.queue))
		if err != nil {
			return 0, fmt.Errorf("enqueue child %d: %w", i, err)
		}
		handles[i] = h
	}
	for i, h := range handles {
		got, err := h.GetResult(dbos.WithHandlePollingInterval(state.cfg.resultPoll))
		if err != nil {
			return i, fmt.Errorf("child %d: %w", i, err)
		}
		if got != i {
			return i, fmt.Errorf("child %d returned %d", i, got)
		}
	}
	state.finished.Add(1)
	return width, nil
}

// pickupWorkflow records when it started.
func pickupWorkflow(_ dbos.Context, i int) (int, error) {
	select {
	case state.started <- pickupStart{i: i, at: time.Now()}:
	default:
	}
	return i, nil
}

func (b *bench) steps(n, s int) error {
	b.finished.Store(0)
	var start time.Time
	var handles []dbos.WorkflowHandle[int]
	var err error
	if b.cfg.backlog {
		t0 := time.Now()
		handles, err = b.enqueueAll(n, func() (dbos.WorkflowHandle[int], error) {
			return dbos.Enqueue[int](b.ctx, queueName, stepsName, s)
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "dbosbench: steps: the %d workflows were enqueued in %.2f s, before the launch\n", n, time.Since(t0).Seconds())
		start = time.Now()
		if err := b.launch(); err != nil {
			return err
		}
	} else {
		if err := b.launch(); err != nil {
			return err
		}
		start = time.Now()
		handles, err = b.enqueueAll(n, func() (dbos.WorkflowHandle[int], error) {
			return dbos.RunWorkflow(b.ctx, stepsWorkflow, s, dbos.WithQueue(b.queue))
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "dbosbench: steps: the %d workflows were enqueued in %.2f s\n", n, time.Since(start).Seconds())
	}
	if err := b.await(start, stepsName, n, n); err != nil {
		return err
	}
	elapsed := time.Since(start)
	if err := b.checkResults(handles, func(int) int { return s }); err != nil {
		return err
	}
	if err := b.checkWorkflows(stepsName, n); err != nil {
		return err
	}
	if err := b.checkSteps(noopName, n*s); err != nil {
		return err
	}
	fmt.Printf("dbos steps: %d workflows x %d steps in %.2f s = %.0f steps/s\n",
		n, s, elapsed.Seconds(), float64(n*s)/elapsed.Seconds())
	return nil
}

func (b *bench) chain(n, length int) error {
	if n >= b.cfg.concurrency {
		return fmt.Errorf("-chains %d: the parents would take every slot of the queue (worker concurrency %d)", n, b.cfg.concurrency)
	}
	if err := b.launch(); err != nil {
		return err
	}
	b.finished.Store(0)
	start := time.Now()
	handles, err := b.enqueueAll(n, func() (dbos.WorkflowHandle[int], error) {
		return dbos.RunWorkflow(b.ctx, chainWorkflow, length, dbos.WithQueue(b.queue))
	})
	if err != nil {
		return err
	}
	if err := b.await(start, chainName, n, n); err != nil {
		return err
	}
	elapsed := time.Since(start)
	if err := b.checkResults(handles, func(int) int { return length }); err != nil {
		return err
	}

	// One chain alone, for the per-step latency.
	b.finished.Store(0)
	alone := time.Now()
	h, err := dbos.RunWorkflow(b.ctx, chainWorkflow, length, dbos.WithQueue(b.queue))
	if err != nil {
		return fmt.Errorf("enqueue the lone chain: %w", err)
	}
	if err := b.await(alone, chainName, 1, n+1); err != nil {
		return err
	}
	if err := b.checkResults([]dbos.WorkflowHandle[int]{h}, func(int) int { return length }); err != nil {
		return err
	}
	b.mu.Lock()
	ends := b.chainEnds[h.GetWorkflowID()]
	b.mu.Unlock()
	if len(ends) != length+1 {
		return fmt.Errorf("the lone chain recorded %d times, want %d", len(ends), length+1)
	}
	perStep := make([]time.Duration, length)
	for i := range perStep {
		perStep[i] = ends[i+1].Sub(ends[i])
	}
	slices.Sort(perStep)
	if err := b.checkWorkflows(chainName, n+1); err != nil {
		return err
	}
	if err := b.checkWorkflows(childName, (n+1)*length); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "dbosbench: chain alone: per step min=%s median=%s max=%s\n",
		perStep[0].Round(10*time.Microsecond), median(perStep).Round(10*time.Microsecond), perStep[length-1].Round(10*time.Microsecond))
	fmt.Printf("dbos chain: %d chains x %d steps in %.2f s = %.0f steps/s; one chain alone: %.1f ms per step\n",
		n, length, elapsed.Seconds(), float64(n*length)/elapsed.Seconds(), float64(median(perStep))/float64(time.Millisecond))
	return nil
}

func (b *bench) fanout(n, width int) error {
	if n >= b.cfg.concurrency {
		return fmt.Errorf("-workflows %d: the parents would take every slot of the queue (worker concurrency %d)", n, b.cfg.concurrency)
	}
	if err := b.launch(); err != nil {
		return err
	}
	b.finished.Store(0)
	start := time.Now()
	handles, err := b.enqueueAll(n, func() (dbos.WorkflowHandle[int], error) {
		return dbos.RunWorkflow(b.ctx, fanoutWorkflow, width, dbos.WithQueue(b.queue))
	})
	if err != nil {
		return err
	}
	if err := b.await(start, fanoutName, n, n); err != nil {
		return err
	}
	elapsed := time.Since(start)
	if err := b.checkResults(handles, func(int) int { return width }); err != nil {
		return err
	}
	if err := b.checkWorkflows(fanoutName, n); err != nil {
		return err
	}
	if err := b.checkWorkflows(childName, n*width); err != nil {
		return err
	}
	fmt.Printf("dbos fan-out: %d workflows x %d steps in %.2f s = %.0f steps/s\n",
		n, width, elapsed.Seconds(), float64(n*width)/elapsed.Seconds())
	return nil
}

func (b *bench) pickup(k int) error {
	if err := b.launch(); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // let the queue runner start and go idle
	var samples, enqueues []time.Duration
	for i := range k {
		t0 := time.Now()
		h, err := dbos.RunWorkflow(b.ctx, pickupWorkflow, i, dbos.WithQueue(b.queue))
		if err != nil {
			return fmt.Errorf("sample %d: enqueue: %w", i, err)
		}
		enqueues = append(enqueues, time.Since(t0))
		select {
		case s := <-b.started:
			if s.i != i {
				return fmt.Errorf("sample %d: workflow %d started instead", i, s.i)
			}
			samples = append(samples, s.at.Sub(t0))
		case <-time.After(5 * time.Second):
			return fmt.Errorf("sample %d: workflow not started within 5s", i)
		}
		// Let it finish, so that the queue is idle for the next sample.
		if err := b.checkResults([]dbos.WorkflowHandle[int]{h}, func(int) int { return i }); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := b.checkWorkflows(pickupName, k); err != nil {
		return err
	}
	slices.Sort(samples)
	slices.Sort(enqueues)
	q := func(ds []time.Duration, p float64) time.Duration {
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(10 * time.Microsecond)
	}
	// Where the time goes: the enqueue's round trips (its commit included),
	// then the rest.
	fmt.Fprintf(os.Stderr, "dbos pickup: enqueue p50=%s of p50=%s\n", q(enqueues, 0.5), q(samples, 0.5))
	fmt.Printf("dbos pickup latency: p50=%s p90=%s p99=%s (n=%d)\n", q(samples, 0.50), q(samples, 0.90), q(samples, 0.99), len(samples))
	return nil
}

// enqueueAll starts n workflows through start, called by cfg.enqueuers
// goroutines at once, and returns their handles in order.
func (b *bench) enqueueAll(n int, start func() (dbos.WorkflowHandle[int], error)) ([]dbos.WorkflowHandle[int], error) {
	handles := make([]dbos.WorkflowHandle[int], n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, b.cfg.enqueuers)
	for range min(b.cfg.enqueuers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				h, err := start()
				if err != nil {
					errs <- fmt.Errorf("enqueue workflow %d: %w", i, err)
					next.Store(int64(n))
					return
				}
				handles[i] = h
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return handles, nil
}

// await waits until finished workflow functions returned (counted in this
// process, so that waiting does not compete with the workers for the
// database), then until the system database holds succeeded workflows named
// name (their outcome is written after the function returns). It fails as
// soon as one of them ended otherwise.
func (b *bench) await(start time.Time, name string, finished, succeeded int) error {
	deadline := start.Add(timeout)
	checked := time.Now()
	for b.finished.Load() < int64(finished) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d workflows finished in %s", name, b.finished.Load(), finished, timeout)
		}
		if time.Since(checked) > 250*time.Millisecond {
			if _, err := b.succeeded(name); err != nil {
				return err
			}
			checked = time.Now()
		}
		time.Sleep(time.Millisecond)
	}
	for {
		n, err := b.succeeded(name)
		if err != nil {
			return err
		}
		if n == succeeded {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d workflows succeeded in %s", name, n, succeeded, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// succeeded counts the workflows named name in SUCCESS, and fails if one is
// in ERROR, CANCELLED or dead-lettered.
func (b *bench) succeeded(name string) (int, error) {
	counts, err := b.statusCounts(name)
	if err != nil {
		return 0, err
	}
	for status, n := range counts {
		switch status {
		case dbos.WorkflowStatusSuccess, dbos.WorkflowStatusPending, dbos.WorkflowStatusEnqueued:
		default:
			return 0, fmt.Errorf("%s: %d workflows are %s", name, n, status)
		}
	}
	return counts[dbos.WorkflowStatusSuccess], nil
}

// statusCounts counts the workflows named name by status.
func (b *bench) statusCounts(name string) (map[dbos.WorkflowStatusType]int, error) {
	rows, err := dbos.GetWorkflowAggregates(b.ctx, dbos.GetWorkflowAggregatesInput{
		GroupByStatus: true, SelectCount: true, Name: []string{name},
	})
	if err != nil {
		return nil, fmt.Errorf("count %s workflows: %w", name, err)
	}
	counts := map[dbos.WorkflowStatusType]int{}
	for _, r := range rows {
		if r.Group["status"] == nil || r.Count == nil {
			return nil, fmt.Errorf("count %s workflows: a row without status or count", name)
		}
		counts[dbos.WorkflowStatusType(*r.Group["status"])] += int(*r.Count)
	}
	return counts, nil
}

// checkWorkflows verifies that exactly want workflows named name exist, all
// in SUCCESS.
func (b *bench) checkWorkflows(name string, want int) error {
	counts, err := b.statusCounts(name)
	if err != nil {
		return err
	}
	if len(counts) != 1 || counts[dbos.WorkflowStatusSuccess] != want {
		return fmt.Errorf("%s: workflows by status %v, want %d in %s", name, counts, want, dbos.WorkflowStatusSuccess)
	}
	return nil
}

// checkResults reads every handle's result and compares it with want(i).
func (b *bench) checkResults(handles []dbos.WorkflowHandle[int], want func(i int) int) error {
	for i, h := range handles {
		got, err := h.GetResult(dbos.WithHandlePollingInterval(b.cfg.resultPoll), dbos.WithHandleTimeout(time.Minute))
		if err != nil {
			return fmt.Errorf("workflow %s: %w", h.GetWorkflowID(), err)
		}
		if got != want(i) {
			return fmt.Errorf("workflow %s returned %d, want %d", h.GetWorkflowID(), got, want(i))
		}
	}
	return nil
}

// checkSteps verifies that want steps named name were checkpointed, none of
// them with an error.
func (b *bench) checkSteps(name string, want int) error {
	rows, err := dbos.GetStepAggregates(b.ctx, dbos.GetStepAggregatesInput{
		GroupByFunctionName: true, GroupByStatus: true, SelectCount: true, FunctionName: []string{name},
	})
	if err != nil {
		return fmt.Errorf("count %s steps: %w", name, err)
	}
	counts := map[string]int{}
	for _, r := range rows {
		if r.Group["status"] == nil || r.Count == nil {
			return fmt.Errorf("count %s steps: a row without status or count", name)
		}
		counts[*r.Group["status"]] += int(*r.Count)
	}
	if len(counts) != 1 || counts["SUCCESS"] != want {
		return fmt.Errorf("%s steps checkpointed by status %v, want %d in SUCCESS", name, counts, want)
	}
	return nil
}

// median of sorted durations.
func median(ds []time.Duration) time.Duration {
	if len(ds)%2 == 1 {
		return ds[len(ds)/2]
	}
	return (ds[len(ds)/2-1] + ds[len(ds)/2]) / 2
}
