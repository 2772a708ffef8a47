package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// bySecond keeps durations by the second (Unix time) they ended in, once
// start has been called.
type bySecond struct {
	mu sync.Mutex
	m  map[int64][]time.Duration
}

// start begins keeping durations (add drops them before).
func (b *bySecond) start() {
	b.mu.Lock()
	b.m = map[int64][]time.Duration{}
	b.mu.Unlock()
}

func (b *bySecond) add(at time.Time, d time.Duration) {
	b.mu.Lock()
	if b.m != nil {
		b.m[at.Unix()] = append(b.m[at.Unix()], d)
	}
	b.mu.Unlock()
}

// take returns what was kept since start or the last take.
func (b *bySecond) take() map[int64][]time.Duration {
	b.mu.Lock()
	m := b.m
	b.m = map[int64][]time.Duration{}
	b.mu.Unlock()
	return m
}

// serverState is what the server was doing in one second of the soak, as one
// look at pg_stat_activity in the middle of that second saw it.
type serverState struct {
	vacuumRun, vacuumEvent, checkpoint, retention bool
	walBytes                                      int64 // WAL written since the previous look
}

// labels names the activities of a second ("quiet" when there were none).
func (s serverState) labels() []string {
	var l []string
	if s.vacuumRun {
		l = append(l, "autovacuum workflow_run")
	}
	if s.vacuumEvent {
		l = append(l, "autovacuum workflow_event")
	}
	if s.checkpoint {
		l = append(l, "checkpoint")
	}
	if s.retention {
		l = append(l, "retention")
	}
	if len(l) == 0 {
		l = append(l, "quiet")
	}
	return l
}

// watchServer looks at the server once a second, in the middle of each
// second, until ctx ends, and returns what it saw by second (Unix time).
func watchServer(ctx context.Context, pool *pgxpool.Pool) <-chan map[int64]serverState {
	out := make(chan map[int64]serverState, 1)
	go func() {
		seen := map[int64]serverState{}
		defer func() { out <- seen }()
		var lastWAL int64
		for {
			now := time.Now()
			next := now.Truncate(time.Second).Add(1500 * time.Millisecond)
			select {
			case <-ctx.Done():
				return
			case <-time.After(next.Sub(now)):
			}
			var s serverState
			var wal int64
			err := pool.QueryRow(ctx, `
				select coalesce(bool_or(backend_type = 'autovacuum worker' and query like '%workflow_run%'), false),
				       coalesce(bool_or(backend_type = 'autovacuum worker' and query like '%workflow_event%'), false),
				       coalesce(bool_or(backend_type = 'checkpointer' and wait_event is distinct from 'CheckpointerMain'), false),
				       coalesce(bool_or(state = 'active' and pid <> pg_backend_pid()
				                        and query like '%delete\_finished\_runs%'), false),
				       (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint
				from pg_stat_activity`).Scan(&s.vacuumRun, &s.vacuumEvent, &s.checkpoint, &s.retention, &wal)
			if err != nil {
				continue // a missed look leaves its second out of the attribution
			}
			if lastWAL > 0 {
				s.walBytes = wal - lastWAL
			}
			lastWAL = wal
			seen[next.Unix()] = s
		}
	}()
	return out
}

// watchWaits samples, ten times a second until ctx ends, what the server's
// active client backends are waiting on, and returns how often each wait
// ("CPU" when on it) was seen.
func watchWaits(ctx context.Context, pool *pgxpool.Pool) <-chan map[string]int {
	out := make(chan map[string]int, 1)
	go func() {
		seen := map[string]int{}
		defer func() { out <- seen }()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := pool.Query(ctx, `
				select coalesce(wait_event_type || ':' || wait_event, 'CPU')
				from pg_stat_activity
				where state = 'active' and backend_type = 'client backend' and pid <> pg_backend_pid()`)
			if err != nil {
				continue
			}
			for rows.Next() {
				var w string
				if rows.Scan(&w) == nil {
					seen[w]++
				}
			}
			rows.Close()
		}
	}()
	return out
}

// printWaits prints the share of each wait among the active backends seen.
func printWaits(seen map[string]int) {
	total := 0
	for _, n := range seen {
		total += n
	}
	if total == 0 {
		return
	}
	names := make([]string, 0, len(seen))
	for w := range seen {
		names = append(names, w)
	}
	slices.SortFunc(names, func(a, b string) int { return seen[b] - seen[a] })
	parts := make([]string, 0, len(names))
	for _, w := range names[:min(10, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", w, 100*float64(seen[w])/float64(total)))
	}
	fmt.Printf("soak active backends (%d seen, 10 looks a second): %s\n", total, strings.Join(parts, ", "))
}

// attribute prints pickup latency by what the server was doing in the second
// each run started: per activity, the p99 over the runs of the seconds it was
// seen in, and the worst seconds with their activities.
// inserts are the producer's insert round trips by second.
func attribute(latencies, inserts map[int64][]time.Duration, states map[int64]serverState) {
	byLabel := map[string][]time.Duration{}
	secondsOf := map[string]int{}
	type second struct {
		at  int64
		p99 time.Duration
		n   int
		s   serverState
	}
	var seconds []second
	for at, ls := range latencies {
		s, ok := states[at]
		if !ok {
			continue
		}
		sorted := slices.Clone(ls)
		slices.Sort(sorted)
		seconds = append(seconds, second{at: at, p99: quantile(sorted, 0.99), n: len(ls), s: s})
		for _, l := range s.labels() {
			byLabel[l] = append(byLabel[l], ls...)
			secondsOf[l]++
		}
	}
	if len(seconds) == 0 {
		return
	}
	labels := make([]string, 0, len(byLabel))
	for l := range byLabel {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	for _, l := range labels {
		ls := byLabel[l]
		slices.Sort(ls)
		fmt.Printf("soak pickup while %s: p50=%s p99=%s over %d s (%d runs)\n",
			l, quantile(ls, 0.5), quantile(ls, 0.99), secondsOf[l], len(ls))
	}
	slices.SortFunc(seconds, func(a, b second) int { return int(b.p99 - a.p99) })
	for _, s := range seconds[:min(8, len(seconds))] {
		ins := slices.Clone(inserts[s.at])
		slices.Sort(ins)
		fmt.Printf("soak worst second %s: p99=%s (%d runs), slowest insert %s, WAL %.1f MiB/s, %s\n",
			time.Unix(s.at, 0).Format("15:04:05"), s.p99, s.n, quantile(ins, 1), float64(s.s.walBytes)/(1<<20),
			strings.Join(s.s.labels(), ", "))
	}
	var all []time.Duration
	for _, ds := range inserts {
		all = append(all, ds...)
	}
	slices.Sort(all)
	fmt.Printf("soak inserts: p50=%s p99=%s max=%s (%d)\n", quantile(all, 0.5), quantile(all, 0.99), quantile(all, 1), len(all))
}
