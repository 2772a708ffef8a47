package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/simple-workflow/simple-workflow/hack/internal/cpu"
)

// burnResult is one burn-down: n runs (or jobs) done in elapsed by workers
// concurrent handlers.
type burnResult struct {
	n        int
	elapsed  time.Duration
	workers  int
	walBytes int64   // WAL the server wrote meanwhile
	cpu      cpu.Use // processor time used meanwhile (zero: not read)
}

func (r burnResult) perSecond() float64 { return float64(r.n) / r.elapsed.Seconds() }

// line formats the result the way make bench prints it; unit is "runs" or
// "jobs".
func (r burnResult) line(who, unit string) string {
	return fmt.Sprintf("%s burn-down: %d %s in %.2f s = %.0f %s/s (workers=%d)",
		who, r.n, unit, r.elapsed.Seconds(), r.perSecond(), unit, r.workers)
}

// cpuPerRun is the processor time one run (or job) of the burn-down cost
// the server and everything else on the machine (the workers, in the
// benchmark's process or the peer's), in microseconds; ok is false when
// the server's time could not be read.
func (r burnResult) cpuPerRun() (server, rest float64, ok bool) {
	if !r.cpu.HasServer() {
		return 0, 0, false
	}
	server, self, other := r.cpu.PerRun(int64(r.n))
	return server, self + other, true
}

// walPerRun is the WAL written per run (or job) of the burn-down.
func (r burnResult) walPerRun() int64 { return r.walBytes / int64(r.n) }

// medianBurn returns the result of median throughput.
func medianBurn(rs []burnResult) burnResult {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b burnResult) int {
		switch {
		case a.perSecond() < b.perSecond():
			return -1
		case a.perSecond() > b.perSecond():
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

// pickupResult is one pickup-latency measurement: quantiles over n samples.
type pickupResult struct {
	p50, p90, p99 time.Duration
	n             int
}

func (r pickupResult) line(who string) string {
	return fmt.Sprintf("%s pickup latency: p50=%s p90=%s p99=%s (n=%d)", who, r.p50, r.p90, r.p99, r.n)
}

// medianPickup takes the median of each quantile on its own.
func medianPickup(rs []pickupResult) pickupResult {
	med := func(get func(pickupResult) time.Duration) time.Duration {
		ds := make([]time.Duration, len(rs))
		for i, r := range rs {
			ds[i] = get(r)
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	return pickupResult{
		p50: med(func(r pickupResult) time.Duration { return r.p50 }),
		p90: med(func(r pickupResult) time.Duration { return r.p90 }),
		p99: med(func(r pickupResult) time.Duration { return r.p99 }),
		n:   rs[0].n,
	}
}
