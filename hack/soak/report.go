package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/hack/internal/cpu"
)

// tableSize is what a table occupies and how many dead tuples it holds.
type tableSize struct {
	table, indexes int64 // bytes (the table includes its TOAST)
	live, dead     int64
}

func (s tableSize) String() string {
	const mib = 1 << 20
	return fmt.Sprintf("%.1f+%.1f MiB (live %d, dead %d)",
		float64(s.table)/mib, float64(s.indexes)/mib, s.live, s.dead)
}

// sizes reads workflow_run and the audit trail, the latter summed over its
// partitions (the default one and the time partitions the manager keeps),
// and how many time partitions there are.
func sizes(ctx context.Context, pool *pgxpool.Pool) (run, event tableSize, partitions int, err error) {
	rows, err := pool.Query(ctx, `
		select case when c.oid = 'workflow.workflow_run'::regclass then 'workflow_run' else 'workflow_event' end,
		       sum(pg_table_size(c.oid))::bigint, sum(pg_indexes_size(c.oid))::bigint,
		       sum(coalesce(s.n_live_tup, 0))::bigint, sum(coalesce(s.n_dead_tup, 0))::bigint,
		       count(*) filter (where c.relname ~ '^workflow_event_p[0-9]')::int
		from pg_class c
		left join pg_stat_user_tables s on s.relid = c.oid
		where c.oid = 'workflow.workflow_run'::regclass
		   or c.oid in (select relid from pg_partition_tree('workflow.workflow_event'))
		group by 1`)
	if err != nil {
		return run, event, 0, fmt.Errorf("read table sizes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var s tableSize
		var parts int
		if err := rows.Scan(&name, &s.table, &s.indexes, &s.live, &s.dead, &parts); err != nil {
			return run, event, 0, fmt.Errorf("scan table sizes: %w", err)
		}
		if name == "workflow_run" {
			run = s
		} else {
			event, partitions = s, parts
		}
	}
	return run, event, partitions, rows.Err()
}

// sample is one reporting interval.
type sample struct {
	elapsed   time.Duration // since the load began
	perSecond float64
	p50, p99  time.Duration
	run       tableSize
	event     tableSize
	parts     int // time partitions of the audit trail
	cpu       cpu.Use
	runs      int64 // runs started in the interval
}

// soak runs the steady load for cfg.duration and prints a line every
// cfg.interval, then a verdict comparing the last interval with the first.
func soak(ctx context.Context, pool *pgxpool.Pool, w *workers, meter cpu.Meter, cfg config) (verdict, error) {
	lctx, stopLoad := context.WithTimeout(ctx, cfg.duration)
	defer stopLoad()
	loadErr := make(chan error, 1)
	var inserts bySecond
	inserts.start()
	w.seconds.start()
	go func() { loadErr <- produce(lctx, pool, cfg.rate, &inserts) }()
	watched := watchServer(lctx, pool)
	waits := watchWaits(lctx, pool)

	var samples []sample
	t := time.NewTicker(cfg.interval)
	defer t.Stop()
	last, lastAt := w.started.Load(), time.Now()
	begin, startRuns := lastAt, last
	first, err := meter.Read()
	if err != nil {
		return verdict{}, err
	}
	lastCPU := first
	w.takeLatencies()
	for {
		select {
		case <-lctx.Done():
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
		now, at := w.started.Load(), time.Now()
		lat := w.takeLatencies()
		reading, err := meter.Read()
		if err != nil {
			return verdict{}, err
		}
		s := sample{elapsed: at.Sub(begin).Round(time.Second), perSecond: float64(now-last) / at.Sub(lastAt).Seconds(),
			p50: quantile(lat, 0.5), p99: quantile(lat, 0.99), cpu: reading.Since(lastCPU), runs: now - last}
		last, lastAt, lastCPU = now, at, reading
		if s.run, s.event, s.parts, err = sizes(ctx, pool); err != nil {
			return verdict{}, err
		}
		samples = append(samples, s)
		fmt.Printf("soak %s: %.0f runs/s, pickup p50=%s p99=%s, workflow_run %s, workflow_event %s in %d time partitions; %s\n",
			s.elapsed, s.perSecond, s.p50, s.p99, s.run, s.event, s.parts, perRun(s.cpu, s.runs, "workers"))
		if lctx.Err() != nil {
			break
		}
	}
	if err := <-loadErr; err != nil {
		return verdict{}, err
	}
	v := printVerdict(samples, cfg.retention+cfg.retentionInterval+2*autovacuumNaptime)
	if end, err := meter.Read(); err == nil {
		v.cpu = end.Since(first)
		v.runs = w.started.Load() - startRuns
		fmt.Printf("soak CPU over the load: %s\n", perRun(v.cpu, v.runs, "workers"))
	}
	attribute(w.seconds.take(), inserts.take(), <-watched)
	printWaits(<-waits)
	return v, nil
}

// autovacuumNaptime is Postgres's default autovacuum_naptime: dead tuples
// pile up for about this long before autovacuum comes back to a table.
const autovacuumNaptime = time.Minute

// verdict is how a soak's last interval compares with its first, by the
// measures hack/soak prints for the engine and reads from River's soak.
type verdict struct {
	throughput float64       // last interval's rate / the first's
	p99First   time.Duration // pickup p99 of the first interval
	worstP99   float64       // the worst interval's p99 / the first's
	sizes      string        // tables' size at the end / once settled ("n/a": too short)
	cpu        cpu.Use       // processor time over the whole load
	runs       int64         // runs started over the whole load
}

// perRun says what the machine's processors did and what one run cost the
// server, the process named self, and the rest of the machine, e.g.
// "machine 92% (server 61%, this process 27%): server 110 µs/run, workers 45 µs/run, rest 3 µs/run".
func perRun(u cpu.Use, runs int64, self string) string {
	server, own, rest := u.PerRun(runs)
	if !u.HasServer() {
		return fmt.Sprintf("%s: %s %.0f µs/run", u, self, own)
	}
	return fmt.Sprintf("%s: server %.0f µs/run, %s %.0f µs/run, rest %.0f µs/run", u, server, self, own, rest)
}

// printVerdict compares the last interval with the first: throughput and p99
// pickup with the first interval (and the worst interval's p99 with the
// first's), sizes over the intervals that ended after settle (the
// retention window and two autovacuum rounds: before that, the tables fill
// up with the window's runs and their dead versions, as they should).
func printVerdict(samples []sample, settle time.Duration) verdict {
	v := verdict{sizes: "n/a"}
	if len(samples) < 2 {
		return v
	}
	first, final := samples[0], samples[len(samples)-1]
	v.throughput, v.p99First = final.perSecond/first.perSecond, first.p99
	worst := first.p99
	for _, s := range samples {
		worst = max(worst, s.p99)
	}
	v.worstP99 = ratio(worst, first.p99)
	fmt.Printf("soak last/first: throughput %.2fx, pickup p99 %.2fx; worst minute's p99 %.2fx the first's\n",
		v.throughput, ratio(final.p99, first.p99), v.worstP99)
	// Sizes: partitions come and go in a sawtooth, so the mean of the last
	// intervals (ten, or half of those after settling) is compared with the
	// mean of as many first ones after settling.
	var settled []sample
	for _, s := range samples {
		if s.elapsed > settle {
			settled = append(settled, s)
		}
	}
	if len(settled) < 2 {
		fmt.Printf("soak sizes: the run was too short to compare sizes after %s (the retention window and two autovacuum rounds)\n", settle)
		return v
	}
	k := min(10, len(settled)/2)
	runFirst, eventFirst := meanSizes(settled[:k])
	runLast, eventLast := meanSizes(settled[len(settled)-k:])
	v.sizes = fmt.Sprintf("%.2fx", (runLast+eventLast)/(runFirst+eventFirst))
	fmt.Printf("soak sizes, mean of the last %d intervals against the first %d after %s (the retention window and two autovacuum rounds): workflow_run %.2fx, workflow_event %.2fx, both %s\n",
		k, k, settle, runLast/runFirst, eventLast/eventFirst, v.sizes)
	return v
}

// meanSizes returns the mean bytes (table and indexes) of workflow_run and
// of the audit trail over samples.
func meanSizes(samples []sample) (run, event float64) {
	for _, s := range samples {
		run += float64(s.run.table + s.run.indexes)
		event += float64(s.event.table + s.event.indexes)
	}
	return run / float64(len(samples)), event / float64(len(samples))
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return a.Seconds() / b.Seconds()
}
