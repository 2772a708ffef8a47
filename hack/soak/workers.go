package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// soakType is the workflow type of every soak run; its payload carries the
// time its insert began ({"t": unix nanoseconds}).
const soakType = "soak.noop.v1"

// workers are the pollers working soak runs; they count the runs they start
// and collect pickup latencies (insert to handler start).
type workers struct {
	client  *simpleworkflow.Client
	cfg     config
	started atomic.Int64

	mu        sync.Mutex
	latencies []time.Duration
	// seconds holds each started run's pickup latency by the second its
	// handler started, for the attribution.
	seconds bySecond
}

func newWorkers(client *simpleworkflow.Client, cfg config) *workers {
	return &workers{client: client, cfg: cfg}
}

func (w *workers) handle(_ context.Context, t *simpleworkflow.Task) (json.RawMessage, error) {
	now := time.Now()
	w.started.Add(1)
	var p struct {
		T int64 `json:"t"`
	}
	if err := json.Unmarshal(t.Payload, &p); err == nil && p.T > 0 {
		d := now.Sub(time.Unix(0, p.T))
		w.mu.Lock()
		w.latencies = append(w.latencies, d)
		w.mu.Unlock()
		w.seconds.add(now, d)
	}
	return nil, nil
}

// takeLatencies returns the latencies collected since the last call, sorted.
func (w *workers) takeLatencies() []time.Duration {
	w.mu.Lock()
	l := w.latencies
	w.latencies = nil
	w.mu.Unlock()
	slices.Sort(l)
	return l
}

// start runs the pollers until the returned function is called.
func (w *workers) start(ctx context.Context) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range w.cfg.pollers {
		p, err := simpleworkflow.NewPoller(w.client, simpleworkflow.PollerConfig{
			TypePrefixes:   []string{"soak."},
			WorkerID:       fmt.Sprintf("soak-%d", i),
			Concurrency:    w.cfg.concurrency,
			ClaimBatchSize: min(w.cfg.batch, w.cfg.concurrency),
			Logger:         slog.New(slog.DiscardHandler),
		})
		if err != nil {
			cancel()
			return nil, fmt.Errorf("poller: %w", err)
		}
		if err := p.Handle(soakType, w.handle); err != nil {
			cancel()
			return nil, fmt.Errorf("poller: %w", err)
		}
		wg.Go(func() { _ = p.Run(ctx) })
	}
	return func() { cancel(); wg.Wait() }, nil
}

// quantile returns the p-quantile of sorted latencies (0 when there are none).
func quantile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))].Round(10 * time.Microsecond)
}
