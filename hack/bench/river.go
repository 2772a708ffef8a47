package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"
)

// riverDatabase is the database River runs on, in the same server as the
// engine's.
const riverDatabase = "river_bench"

// river runs the peer, hack/riverbench (a Go module of its own), as a child
// process against a database of its own and parses the lines it prints.
type river struct{ peerBinary }

// newRiver builds hack/riverbench and creates River's database when it is
// missing.
func newRiver(ctx context.Context, serverURL string) (*river, error) {
	p, err := buildPeer(ctx, serverURL, "riverbench", riverDatabase)
	if err != nil {
		return nil, err
	}
	return &river{p}, nil
}

var (
	riverBurnLine   = regexp.MustCompile(`river(?: \(\d+ clients\))? burn-down: (\d+) jobs in ([0-9.]+) s = ([0-9.]+) jobs/s \(workers=(\d+)\)`)
	riverWALLine    = regexp.MustCompile(`river burn-down WAL: (\d+) bytes`)
	riverPickupLine = regexp.MustCompile(`river pickup latency: p50=(\S+) p90=(\S+) p99=(\S+) \(n=(\d+)\)`)
	riverSplitLine  = regexp.MustCompile(`river pickup: insert p50=\S+ of p50=\S+`)
)

// burnDown measures River's burn-down of n no-op jobs by clients River
// clients of workers each, sharing a pool of conns connections.
func (r *river) burnDown(ctx context.Context, n, clients, workers, conns int) (burnResult, error) {
	out, _, err := r.run(ctx, "-mode", "burn-down", "-jobs", strconv.Itoa(n), "-clients", strconv.Itoa(clients),
		"-workers", strconv.Itoa(workers), "-conns", strconv.Itoa(conns))
	if err != nil {
		return burnResult{}, err
	}
	m := riverBurnLine.FindStringSubmatch(out)
	if m == nil {
		return burnResult{}, fmt.Errorf("riverbench printed no burn-down line: %q", out)
	}
	var res burnResult
	res.n, _ = strconv.Atoi(m[1])
	secs, _ := strconv.ParseFloat(m[2], 64)
	res.elapsed = time.Duration(secs * float64(time.Second))
	res.workers, _ = strconv.Atoi(m[4])
	if m := riverWALLine.FindStringSubmatch(out); m != nil {
		res.walBytes, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return res, nil
}

// pickup measures River's pickup latency over n single inserts.
func (r *river) pickup(ctx context.Context, n int) (pickupResult, error) {
	out, _, err := r.run(ctx, "-mode", "pickup", "-latency-samples", strconv.Itoa(n))
	if err != nil {
		return pickupResult{}, err
	}
	m := riverPickupLine.FindStringSubmatch(out)
	if m == nil {
		return pickupResult{}, fmt.Errorf("riverbench printed no pickup line: %q", out)
	}
	if split := riverSplitLine.FindString(out); split != "" {
		fmt.Fprintln(os.Stderr, split) // where River's pickup goes, beside the engine's
	}
	return r.parsePickup(m)
}
