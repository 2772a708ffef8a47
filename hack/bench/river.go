package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/simple-workflow/simple-workflow/hack/internal/cpu"
)

// riverDatabase is the database River runs on, in the same server as the
// engine's.
const riverDatabase = "river_bench"

// river runs the peer, hack/riverbench (a Go module of its own), as a child
// process against a database of its own and parses the lines it prints.
type river struct {
	peerBinary
	meter cpu.Meter
}

// newRiver builds hack/riverbench and creates River's database when it is
// missing.
func newRiver(ctx context.Context, serverURL string, meter cpu.Meter) (*river, error) {
	p, err := buildPeer(ctx, serverURL, "riverbench", riverDatabase)
	if err != nil {
		return nil, err
	}
	return &river{peerBinary: p, meter: meter}, nil
}

var (
	riverBurnLine = regexp.MustCompile(`river(?: \(\d+ clients\))? burn-down: (\d+) jobs in ([0-9.]+) s = ([0-9.]+) jobs/s \(workers=(\d+)\)`)
	riverWALLine  = regexp.MustCompile(`river burn-down WAL: (\d+) bytes`)
	// The lines riverbench prints around the burn-down's timed part.
	riverTimingBegins = "river burn-down: timing begins"
	riverTimingEnds   = "river burn-down: timing ends"
	riverPickupLine   = regexp.MustCompile(`river pickup latency: p50=(\S+) p90=(\S+) p99=(\S+) \(n=(\d+)\)`)
	riverSplitLine    = regexp.MustCompile(`river pickup: insert p50=\S+ of p50=\S+`)
)

// burnDown measures River's burn-down of n no-op jobs by clients River
// clients of workers each, sharing a pool of conns connections.
func (r *river) burnDown(ctx context.Context, n, clients, workers, conns int) (burnResult, error) {
	// The processor time of the server and of the machine is read when
	// riverbench says its timed part begins and ends.
	var begin, end cpu.Reading
	lines := &lineWatcher{on: map[string]func(){
		riverTimingBegins: func() { begin, _ = r.meter.Read() },
		riverTimingEnds:   func() { end, _ = r.meter.Read() },
	}}
	if _, err := r.Stream(ctx, lines, "-mode", "burn-down", "-jobs", strconv.Itoa(n), "-clients", strconv.Itoa(clients),
		"-workers", strconv.Itoa(workers), "-conns", strconv.Itoa(conns)); err != nil {
		return burnResult{}, err
	}
	out := lines.all.String()
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
	if !begin.At.IsZero() && !end.At.IsZero() {
		res.cpu = end.Since(begin)
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

// lineWatcher keeps what a peer writes and calls a function as soon as a
// whole line equal to one of its keys arrives.
type lineWatcher struct {
	on      map[string]func()
	all     bytes.Buffer
	partial []byte
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.all.Write(p)
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		if f := w.on[string(w.partial[:i])]; f != nil {
			f()
		}
		w.partial = w.partial[i+1:]
	}
}
