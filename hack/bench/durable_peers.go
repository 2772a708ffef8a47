package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// durableFigures are the durable-execution measurements of every round,
// the engine's and DBOS's side by side (DBOS's empty without the peer).
type durableFigures struct {
	engineSteps, dbosSteps      []float64
	engineDAG                   []dagResult
	dbosChain                   []dbosChainResult
	dbosFanout                  []float64
	dbosPickup                  []pickupResult
	stepsMeasured, dagsMeasured bool
}

// durablePeers measures journaled steps and DAG chains and fan-outs,
// cfg.rounds times, alternating the engine and DBOS Transact (when d is not
// nil) within each round: the engine's steps, DBOS's steps, the engine's
// DAGs, DBOS's chains and fan-outs. It prints each round's lines on
// standard error and the medians on standard output.
func durablePeers(ctx context.Context, pool *pgxpool.Pool, client *simpleworkflow.Client, cfg config, d *dbos) (*durableFigures, error) {
	f := &durableFigures{stepsMeasured: cfg.measures("steps"), dagsMeasured: cfg.measures("dag")}
	for i := range cfg.rounds {
		if f.stepsMeasured {
			e, err := stepThroughput(ctx, pool, client, cfg)
			if err != nil {
				return nil, err
			}
			f.engineSteps = append(f.engineSteps, e)
			if d != nil {
				r, err := d.steps(ctx, cfg.stepRuns, cfg.steps)
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(os.Stderr, "round %d: dbos steps %.0f steps/s\n", i+1, r.perSecond)
				f.dbosSteps = append(f.dbosSteps, r.perSecond)
			}
		}
		if f.dagsMeasured {
			e, err := dagThroughput(ctx, pool, client, cfg)
			if err != nil {
				return nil, err
			}
			f.engineDAG = append(f.engineDAG, e)
			if d != nil {
				c, err := d.chain(ctx, cfg.dagRuns, 10)
				if err != nil {
					return nil, err
				}
				fo, err := d.fanout(ctx, max(1, cfg.dagRuns/10), 100)
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(os.Stderr, "round %d: dbos chain %.0f steps/s, one chain alone %.1f ms per step; fan-out %.0f steps/s\n",
					i+1, c.perSecond, c.perStepMs, fo.perSecond)
				f.dbosChain = append(f.dbosChain, c)
				f.dbosFanout = append(f.dbosFanout, fo.perSecond)
			}
		}
	}
	return f, nil
}

// print writes the medians and the engine/dbos ratio lines, with the
// targets of each: journaled steps and fan-outs at least 10x DBOS,
// concurrent chains at least 3x with the engine's rounds within 20 % of
// each other, and one chain alone at most 2x the engine's own pickup p50
// per step.
func (f *durableFigures) print(enginePickup []pickupResult) {
	if f == nil {
		return
	}
	var ratios []string
	if len(f.engineSteps) > 0 {
		fmt.Printf("durable steps (median of %d rounds): engine %.0f steps/s", len(f.engineSteps), medianOf(f.engineSteps))
		if len(f.dbosSteps) > 0 {
			fmt.Printf(", dbos %.0f steps/s", medianOf(f.dbosSteps))
			ratios = append(ratios, fmt.Sprintf("journaled steps %.2fx (target 10x)", medianOf(f.engineSteps)/medianOf(f.dbosSteps)))
		}
		fmt.Println()
	}
	if len(f.engineDAG) > 0 {
		var chains, perStep, fans []float64
		for _, r := range f.engineDAG {
			chains, perStep, fans = append(chains, r.chain), append(perStep, r.perStepMs), append(fans, r.fanout)
		}
		lo, hi := slices.Min(chains), slices.Max(chains)
		fmt.Printf("dag (median of %d rounds): engine chains %.0f steps/s (rounds %s; spread %.0f %%), one chain alone %.1f ms per step, fan-out %.0f steps/s",
			len(chains), medianOf(chains), joinFloats(chains), 100*(hi-lo)/hi, medianOf(perStep), medianOf(fans))
		if len(f.dbosChain) > 0 {
			var dc, dps []float64
			for _, c := range f.dbosChain {
				dc, dps = append(dc, c.perSecond), append(dps, c.perStepMs)
			}
			fmt.Printf("; dbos chains %.0f steps/s (rounds %s), one chain alone %.1f ms per step, fan-out %.0f steps/s",
				medianOf(dc), joinFloats(dc), medianOf(dps), medianOf(f.dbosFanout))
			ratios = append(ratios,
				fmt.Sprintf("concurrent chains %.2fx (target 3x, rounds within 20 %%: %.0f %%)", medianOf(chains)/medianOf(dc), 100*(hi-lo)/hi),
				fmt.Sprintf("fan-out %.2fx (target 10x)", medianOf(fans)/medianOf(f.dbosFanout)),
				fmt.Sprintf("one chain alone %.2fx quicker per step", medianOf(dps)/medianOf(perStep)))
		}
		fmt.Println()
		if len(enginePickup) > 0 {
			p50 := float64(medianPickup(enginePickup).p50.Microseconds()) / 1000
			fmt.Printf("dag: one chain alone %.1f ms per step = %.2fx the engine's own pickup p50 (%.2f ms; target at most 2x)\n",
				medianOf(perStep), medianOf(perStep)/p50, p50)
		}
	}
	if len(f.dbosPickup) > 0 && len(enginePickup) > 0 {
		ratios = append(ratios, fmt.Sprintf("pickup p50 %.2fx (lower is quicker)",
			medianPickup(enginePickup).p50.Seconds()/medianPickup(f.dbosPickup).p50.Seconds()))
	}
	if len(ratios) > 0 {
		fmt.Println("engine/dbos: " + strings.Join(ratios, ", "))
	}
}

// medianOf is the median of xs, 0 when there is none.
func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return medianMs(xs)
}

// joinFloats formats xs as "a / b / c".
func joinFloats(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, " / ")
}
