package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Shape of the flow-limit benchmark.
const (
	flowKeys      = 1000 // concurrency keys of the limited type's runs
	flowClaim     = 500  // runs per claim
	flowHotParked = 100000
)

// flowBench measures what flow limits cost a claim, side by side with the
// plain claim in the same run. It prints
//
//	flow limits: claim of 500 runs, none held back: plain X ms; plain with keys Y ms = R x; a cap per type ...; a cap per key ... = R x the plain claim with keys (S x without); every limit ...; plain with keys again (the control) ... = R x
//	flow limits: completion of 500 runs: plain X ms; ... (the same types, each completion against the plain one)
//	flow limits: claims of 20 runs of other keys behind 100000 runs parked on one key Z ms (without them W ms) = S x
//
// Each round records cfg.flowRuns runs of each of six types: plain
// without and with concurrency keys, a cap per type, a cap per key, every
// limit at once (all generous enough that none holds a run back, so every
// claim leases the same runs: the difference is the limits' own work), and
// the plain type with keys once more, then claims and completes them 500 at
// a time, the types in turn claim by claim. The median claim time of each
// is printed, and each ratio is the median of the ratios of claims made
// side by side (the i-th claim of a type against the i-th of the plain
// claim of the same runs: with keys for the limits by key, and without), so
// that the machine's drift over a round, which moves both alike, cancels.
// The second plain claim with keys is the control: the same work measured
// twice, its ratio shows how far apart two equal claims come out in this
// run. Then one key gets flowHotParked runs, parked by its limit of one,
// and claims of other keys are timed with and without them.
func flowBench(ctx context.Context, pool *pgxpool.Pool, cfg config) error {
	if cfg.flowRuns <= 0 {
		return nil
	}
	db, cleanup, err := benchDatabase(ctx, pool, "flow")
	if err != nil {
		return err
	}
	defer cleanup()
	eng, err := engine.New(db)
	if err != nil {
		return err
	}
	big := func(v int32) *int32 { return &v }
	const hot = "bench.flow.hot.v1"
	// The plain type without and with keys first; then a cap per type, a
	// cap per key, every limit at once (a cap per type and per key, a rate
	// per key), and the plain type with keys again, the control.
	kinds := []struct {
		name, label string
		flow        engine.FlowLimits
		keyed       bool
	}{
		{"bench.flow.plain.v1", "plain", engine.FlowLimits{}, false},
		{"bench.flow.keyed.v1", fmt.Sprintf("plain with keys (%d keys, no limit)", flowKeys), engine.FlowLimits{}, true},
		{"bench.flow.type.v1", "a cap per type", engine.FlowLimits{MaxLeased: big(100000)}, false},
		{"bench.flow.key.v1", fmt.Sprintf("a cap per key over %d keys", flowKeys), engine.FlowLimits{MaxLeasedPerKey: big(100000)}, true},
		{"bench.flow.all.v1", "every limit (per type, per key, a rate per key)", engine.FlowLimits{
			MaxLeased: big(100000), MaxLeasedPerKey: big(100000), RateLimit: big(1000000),
			RatePeriod: time.Second, RatePerKey: true}, true},
		{"bench.flow.control.v1", "plain with keys again (the control)", engine.FlowLimits{}, true},
	}
	for _, k := range kinds {
		if err := eng.UpsertRegistryEntry(ctx, engine.RegistryEntry{
			WorkflowName: k.name, Runtime: engine.RuntimeGo, Enabled: true, Flow: k.flow,
		}); err != nil {
			return err
		}
	}
	if err := eng.UpsertRegistryEntry(ctx, engine.RegistryEntry{
		WorkflowName: hot, Runtime: engine.RuntimeGo, Enabled: true, Flow: engine.FlowLimits{MaxLeasedPerKey: big(1)},
	}); err != nil {
		return err
	}
	ms := make([][]float64, len(kinds))   // claim times
	done := make([][]float64, len(kinds)) // completion times
	for round := range cfg.rounds {
		for _, k := range kinds {
			if err := createKeyed(ctx, eng, k.name, cfg.flowRuns, func(i int) string {
				if !k.keyed {
					return ""
				}
				return fmt.Sprintf("customer-%d", i%flowKeys)
			}); err != nil {
				return err
			}
		}
		// Claim by claim, the types in turn, each round from the next type
		// on (so that no type always follows the same one).
		for left := cfg.flowRuns; left > 0; left -= flowClaim {
			for j := range kinds {
				i := (j + round) % len(kinds)
				k := kinds[i]
				c, err := timedCycle(ctx, eng, k.name)
				if err != nil {
					return err
				}
				if c.n != min(flowClaim, left) {
					return fmt.Errorf("flow bench: a claim of %s took %d runs, want %d (a limit held runs back)", k.name, c.n, min(flowClaim, left))
				}
				ms[i] = append(ms[i], float64(c.claim.Microseconds())/1000)
				done[i] = append(done[i], float64(c.complete.Microseconds())/1000)
			}
		}
	}
	fmt.Fprintf(os.Stderr, "flow: %d claims of each type\n", len(ms[0]))
	// Each limited claim against the plain claim of the same runs: runs
	// without keys for the cap per type, runs with keys for the limits by
	// key (a run's key costs its index entries whether or not a limit
	// reads it); and against the plain claim without keys.
	line := fmt.Sprintf("flow limits: claim of %d runs, none held back: plain %.2f ms; %s %.2f ms = %.2fx",
		flowClaim, medianMs(ms[0]), kinds[1].label, medianMs(ms[1]), pairedRatio(ms[1], ms[0]))
	for i, k := range kinds[2:] {
		m := ms[i+2]
		if k.keyed {
			line += fmt.Sprintf("; %s %.2f ms = %.2fx the plain claim with keys (%.2fx without)",
				k.label, medianMs(m), pairedRatio(m, ms[1]), pairedRatio(m, ms[0]))
		} else {
			line += fmt.Sprintf("; %s %.2f ms = %.2fx", k.label, medianMs(m), pairedRatio(m, ms[0]))
		}
	}
	fmt.Println(line)
	// Completions: a slot of a key freed lets a parked run of the key go,
	// so ending runs of a type with a cap per key does more than ending
	// others'.
	line = fmt.Sprintf("flow limits: completion of %d runs: plain %.2f ms", flowClaim, medianMs(done[0]))
	for i, k := range kinds[1:] {
		d := done[i+1]
		if k.keyed && i > 0 {
			line += fmt.Sprintf("; %s %.2f ms = %.2fx the plain completion with keys", k.label, medianMs(d), pairedRatio(d, done[1]))
		} else {
			line += fmt.Sprintf("; %s %.2f ms = %.2fx", k.label, medianMs(d), pairedRatio(d, done[0]))
		}
	}
	fmt.Println(line)

	// Other keys behind one hot key's parked runs.
	otherKeys := func(i int) string { return fmt.Sprintf("cold-%d", i) }
	coldClaims := func() (float64, error) {
		var ms []float64
		for range 20 {
			if err := createKeyed(ctx, eng, hot, 20, otherKeys); err != nil {
				return 0, err
			}
			d, n, err := timedClaim(ctx, eng, hot)
			if err != nil {
				return 0, err
			}
			if n < 20 {
				return 0, fmt.Errorf("flow bench: a claim of the cold keys took %d runs, want 20", n)
			}
			ms = append(ms, float64(d.Microseconds())/1000)
		}
		return medianMs(ms), nil
	}
	without, err := coldClaims()
	if err != nil {
		return err
	}
	if err := createKeyed(ctx, eng, hot, flowHotParked, func(int) string { return "hot" }); err != nil {
		return err
	}
	// The first claims park the hot key's runs, 10,000 per pass.
	for range flowHotParked/10000 + 1 {
		if _, _, err := timedClaim(ctx, eng, hot); err != nil {
			return err
		}
	}
	with, err := coldClaims()
	if err != nil {
		return err
	}
	fmt.Printf("flow limits: claims of 20 runs of other keys behind %d runs parked on one key %.2f ms (without them %.2f ms) = %.2fx\n",
		flowHotParked, with, without, with/without)
	return nil
}

// createKeyed records n runs of typ, run i with the concurrency key key(i).
func createKeyed(ctx context.Context, eng *engine.Engine, typ string, n int, key func(int) string) error {
	for start := 0; start < n; start += 5000 {
		ps := make([]engine.CreateParams, min(5000, n-start))
		for i := range ps {
			ps[i] = engine.CreateParams{Type: typ, ConcurrencyKey: key(start + i)}
		}
		if _, err := eng.CreateRuns(ctx, ps); err != nil {
			return fmt.Errorf("flow bench: record runs of %s: %w", typ, err)
		}
	}
	return nil
}

// timedClaim claims up to flowClaim runs of typ, times the claim, and
// completes what it took (see timedCycle).
func timedClaim(ctx context.Context, eng *engine.Engine, typ string) (time.Duration, int, error) {
	c, err := timedCycle(ctx, eng, typ)
	return c.claim, c.n, err
}

// cycle is one claim of a type and the completion of what it took.
type cycle struct {
	claim, complete time.Duration
	n               int
}

// timedCycle claims up to flowClaim runs of typ and completes them, timing
// each call.
func timedCycle(ctx context.Context, eng *engine.Engine, typ string) (cycle, error) {
	start := time.Now()
	runs, err := eng.ClaimRuns(ctx, engine.ClaimParams{
		WorkerID: "flow-bench", Types: []string{typ}, Runtime: engine.RuntimeGo, Limit: flowClaim,
		LeaseDuration: time.Minute,
	})
	c := cycle{claim: time.Since(start), n: len(runs)}
	if err != nil {
		return c, fmt.Errorf("flow bench: claim %s: %w", typ, err)
	}
	cs := make([]engine.Completion, len(runs))
	for i, r := range runs {
		cs[i] = engine.Completion{LeaseRef: engine.LeaseRef{ID: r.ID, Token: r.LeaseToken, Attempt: r.Attempt}}
	}
	start = time.Now()
	if _, err := eng.CompleteRuns(ctx, "flow-bench", cs); err != nil {
		return c, fmt.Errorf("flow bench: complete %d runs of %s: %w", len(cs), typ, err)
	}
	c.complete = time.Since(start)
	return c, nil
}

// pairedRatio is the median of a[i]/b[i]: claims made side by side, each
// against its neighbour (a and b have one entry per claim, in order).
func pairedRatio(a, b []float64) float64 {
	rs := make([]float64, len(a))
	for i := range a {
		rs[i] = a[i] / b[i]
	}
	return medianOf(rs)
}

// medianMs is the median of xs (xs is not changed).
func medianMs(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
