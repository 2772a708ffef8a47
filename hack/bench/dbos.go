package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"
)

// dbosDatabase is the database DBOS Transact runs on (its system database,
// which hack/dbosbench resets on every run), in the same server as the
// engine's.
const dbosDatabase = "dbos_bench"

// dbos runs the peer DBOS Transact for Go, hack/dbosbench (a Go module of its
// own), as a child process against a database of its own and parses the lines
// it prints. Every measurement runs through one DBOS queue of worker
// concurrency 1,000 polled every 5 ms, results awaited by polling every
// 10 ms, on DBOS's default pool of 20 connections (see hack/dbosbench).
type dbos struct{ peerBinary }

// newDBOS builds hack/dbosbench and creates DBOS's database when it is
// missing.
func newDBOS(ctx context.Context, serverURL string) (*dbos, error) {
	p, err := buildPeer(ctx, serverURL, "dbosbench", dbosDatabase)
	if err != nil {
		return nil, err
	}
	return &dbos{p}, nil
}

// dbosThroughput is one throughput measurement of DBOS: n workflows (or
// chains) of steps steps each, done in elapsed.
type dbosThroughput struct {
	n, steps  int
	elapsed   time.Duration
	perSecond float64 // steps per second, as dbosbench printed it
}

// dbosChainResult is the chain measurement: its throughput, then the latency
// of a step of one chain alone.
type dbosChainResult struct {
	dbosThroughput
	perStepMs float64
}

var (
	dbosStepsLine  = regexp.MustCompile(`dbos steps: (\d+) workflows x (\d+) steps in ([0-9.]+) s = ([0-9.]+) steps/s`)
	dbosChainLine  = regexp.MustCompile(`dbos chain: (\d+) chains x (\d+) steps in ([0-9.]+) s = ([0-9.]+) steps/s; one chain alone: ([0-9.]+) ms per step`)
	dbosFanoutLine = regexp.MustCompile(`dbos fan-out: (\d+) workflows x (\d+) steps in ([0-9.]+) s = ([0-9.]+) steps/s`)
	dbosPickupLine = regexp.MustCompile(`dbos pickup latency: p50=(\S+) p90=(\S+) p99=(\S+) \(n=(\d+)\)`)
	dbosSplitLine  = regexp.MustCompile(`dbos pickup: enqueue p50=\S+ of p50=\S+`)
)

// steps measures DBOS's durable steps: workflows workflows, each running
// steps no-op steps, enqueued before DBOS is launched and timed from the
// launch (-backlog): a backlog burned down, as the engine's steps are
// measured (their runs inserted first, timed from the pollers' start).
func (d *dbos) steps(ctx context.Context, workflows, steps int) (dbosThroughput, error) {
	out, _, err := d.run(ctx, "-mode", "steps", "-backlog", "-workflows", strconv.Itoa(workflows), "-steps", strconv.Itoa(steps))
	if err != nil {
		return dbosThroughput{}, err
	}
	m := dbosStepsLine.FindStringSubmatch(out)
	if m == nil {
		return dbosThroughput{}, fmt.Errorf("dbosbench printed no steps line: %q", out)
	}
	return parseDBOSThroughput(m[1:5])
}

// chain measures chains of child workflows: chains parents at once, each
// running length children one after the other; then one chain alone.
func (d *dbos) chain(ctx context.Context, chains, length int) (dbosChainResult, error) {
	out, _, err := d.run(ctx, "-mode", "chain", "-chains", strconv.Itoa(chains), "-length", strconv.Itoa(length))
	if err != nil {
		return dbosChainResult{}, err
	}
	m := dbosChainLine.FindStringSubmatch(out)
	if m == nil {
		return dbosChainResult{}, fmt.Errorf("dbosbench printed no chain line: %q", out)
	}
	t, err := parseDBOSThroughput(m[1:5])
	if err != nil {
		return dbosChainResult{}, err
	}
	perStep, err := strconv.ParseFloat(m[5], 64)
	if err != nil {
		return dbosChainResult{}, fmt.Errorf("parse dbosbench chain line %q: %w", m[0], err)
	}
	return dbosChainResult{dbosThroughput: t, perStepMs: perStep}, nil
}

// fanout measures fan-outs of child workflows: workflows parents at once, each
// starting width children at once and awaiting them all.
func (d *dbos) fanout(ctx context.Context, workflows, width int) (dbosThroughput, error) {
	out, _, err := d.run(ctx, "-mode", "fanout", "-workflows", strconv.Itoa(workflows), "-width", strconv.Itoa(width))
	if err != nil {
		return dbosThroughput{}, err
	}
	m := dbosFanoutLine.FindStringSubmatch(out)
	if m == nil {
		return dbosThroughput{}, fmt.Errorf("dbosbench printed no fan-out line: %q", out)
	}
	return parseDBOSThroughput(m[1:5])
}

// pickup measures DBOS's pickup latency over n single enqueues on an idle
// queue.
func (d *dbos) pickup(ctx context.Context, n int) (pickupResult, error) {
	out, errOut, err := d.run(ctx, "-mode", "pickup", "-latency-samples", strconv.Itoa(n))
	if err != nil {
		return pickupResult{}, err
	}
	m := dbosPickupLine.FindStringSubmatch(out)
	if m == nil {
		return pickupResult{}, fmt.Errorf("dbosbench printed no pickup line: %q", out)
	}
	if split := dbosSplitLine.FindString(errOut); split != "" {
		fmt.Fprintln(os.Stderr, split) // where DBOS's pickup goes, beside the engine's
	}
	return d.parsePickup(m)
}

// parseDBOSThroughput reads the count, steps, seconds and steps/s captured
// from a throughput line.
func parseDBOSThroughput(fields []string) (dbosThroughput, error) {
	var t dbosThroughput
	var err error
	if t.n, err = strconv.Atoi(fields[0]); err != nil {
		return dbosThroughput{}, fmt.Errorf("parse dbosbench count %q: %w", fields[0], err)
	}
	if t.steps, err = strconv.Atoi(fields[1]); err != nil {
		return dbosThroughput{}, fmt.Errorf("parse dbosbench steps %q: %w", fields[1], err)
	}
	secs, err := strconv.ParseFloat(fields[2], 64)
	if err != nil {
		return dbosThroughput{}, fmt.Errorf("parse dbosbench seconds %q: %w", fields[2], err)
	}
	t.elapsed = time.Duration(secs * float64(time.Second))
	if t.perSecond, err = strconv.ParseFloat(fields[3], 64); err != nil {
		return dbosThroughput{}, fmt.Errorf("parse dbosbench steps/s %q: %w", fields[3], err)
	}
	return t, nil
}
