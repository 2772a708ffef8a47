package engine_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// One claim and one completion of runs recorded in three history spans
// (ids an owner chose, an hour apart, spans of an hour) and of new runs
// write one batch row per span each, naming exactly that span's runs: the
// claim's and the completion's shortcut for the span of their oldest run
// places every other run by its own creation time.
func TestBatchRowsKeepToTheirRunsSpans(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_settings set history_partition = interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	spans := map[string][]string{}
	for h := 3; h >= 1; h-- {
		for i := range 4 {
			var id, span string
			if err := b.pool.QueryRow(b.ctx, `insert into workflow.workflow_run (id, type)
				values (workflow.run_id_at(workflow.now() - make_interval(hours => $1) + make_interval(secs => $2)), 'span.job.v1')
				returning id::text, workflow.history_span_start(workflow.run_id_time(id), interval '1 hour')::text`,
				h, i).Scan(&id, &span); err != nil {
				t.Fatal(err)
			}
			spans[span] = append(spans[span], id)
		}
	}
	for range 4 {
		id := b.create(t, engine.CreateParams{Type: "span.job.v1"})
		var span string
		if err := b.pool.QueryRow(b.ctx, `select workflow.history_span_start(workflow.run_id_time($1::uuid), interval '1 hour')::text`,
			id).Scan(&span); err != nil {
			t.Fatal(err)
		}
		spans[span] = append(spans[span], id)
	}
	if len(spans) < 4 {
		t.Fatalf("the runs fall in %d spans, want 4", len(spans))
	}
	got := b.claim(t, "w", []string{"span."}, 100)
	if len(got) != 16 {
		t.Fatalf("claimed %d runs, want 16", len(got))
	}
	b.completeAll(t, "w", got)
	var all []string
	for _, ids := range spans {
		all = append(all, ids...)
	}
	rows := b.batchRows(t, all)
	for _, kind := range []string{"started", "succeeded"} {
		var seen int
		for _, r := range rows {
			if r.Type != kind {
				continue
			}
			seen++
			var span string
			if err := b.pool.QueryRow(b.ctx, `select workflow.history_span_start(workflow.run_id_time($1::uuid), interval '1 hour')::text`,
				r.Runs[0]).Scan(&span); err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(spans[span])
			slices.Sort(want)
			if !slices.Equal(r.Runs, want) {
				t.Fatalf("the %s row of span %s names %v, want %v", kind, span, r.Runs, want)
			}
		}
		if seen != len(spans) {
			t.Fatalf("%d %s rows, want one per span (%d)", seen, kind, len(spans))
		}
	}
}

// A claim gives every run its own token, a later claim of the same run
// another, and no token is its fence or another run's.
func TestEveryClaimDrawsNewTokens(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 20 {
		b.create(t, engine.CreateParams{Type: "token.job.v1"})
	}
	first := b.claim(t, "w", []string{"token."}, 20)
	seen := map[int64]bool{}
	for _, c := range first {
		if seen[c.LeaseToken] {
			t.Fatalf("token %d given twice in one claim", c.LeaseToken)
		}
		seen[c.LeaseToken] = true
	}
	refs := make([]engine.LeaseRef, len(first))
	for i, c := range first {
		refs[i] = c.Ref()
	}
	if _, err := b.eng.ReleaseRuns(b.ctx, "w", refs); err != nil {
		t.Fatal(err)
	}
	again := b.claim(t, "w", []string{"token."}, 20)
	if len(again) != 20 {
		t.Fatalf("claimed %d runs again, want 20", len(again))
	}
	for _, c := range again {
		if seen[c.LeaseToken] {
			t.Fatalf("run %s got a token of the earlier claim again", c.ID)
		}
		var fence int64
		if err := b.pool.QueryRow(b.ctx, `select lease_token from workflow.workflow_run where id = $1`, c.ID).Scan(&fence); err != nil {
			t.Fatal(err)
		}
		if fence == c.LeaseToken {
			t.Fatalf("run %s keeps its token in the row", c.ID)
		}
	}
	// The tokens of the earlier claim no longer write.
	done, err := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: refs[0], Result: json.RawMessage(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 0 {
		t.Fatalf("an earlier claim's token completed %+v", done)
	}
	b.completeAll(t, "w", again)
}

// The shortcut's span ends where history_span_start says, in seconds, not
// a calendar day later in the session's time zone: in Berlin the day the
// clocks go back (2026-10-25) lasts 25 hours, and runs of the first hour
// of the next day (UTC) get their own batch rows.
func TestBatchRowsKeepToTheirSpansAcrossAClockChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_settings set history_partition = interval '1 day'`); err != nil {
		t.Fatal(err)
	}
	conn, exec := session(t, b.ctx, b.pool)
	exec(`set timezone = 'Europe/Berlin'`)
	spans := map[string][]string{}
	for i, at := range []string{"2026-10-25 12:00:00+00", "2026-10-25 23:59:00+00", "2026-10-26 00:30:00+00", "2026-10-26 00:45:00+00"} {
		var id string
		if err := conn.QueryRow(b.ctx, `insert into workflow.workflow_run (id, type)
			values (workflow.run_id_at($1::timestamptz + make_interval(secs => $2)), 'dst.job.v1') returning id::text`,
			at, i).Scan(&id); err != nil {
			t.Fatal(err)
		}
		spans[at[:10]] = append(spans[at[:10]], id)
	}
	var ids []string
	var tokens []int64
	rows, err := conn.Query(b.ctx, `select id::text, lease_token from workflow.claim_runs('w', '{dst.}', null, 10, 30000)`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var tok int64
		if err := rows.Scan(&id, &tok); err != nil {
			t.Fatal(err)
		}
		ids, tokens = append(ids, id), append(tokens, tok)
	}
	if rows.Err() != nil || len(ids) != 4 {
		t.Fatalf("claimed %d runs (%v), want 4", len(ids), rows.Err())
	}
	if _, err := conn.Exec(b.ctx, `select count(*) from workflow.complete_runs('w', $1::uuid[], $2::bigint[],
		array_fill('{}'::jsonb, array[cardinality($1::uuid[])]))`, ids, tokens); err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(spans["2026-10-25"]), spans["2026-10-26"]...)
	for _, kind := range []string{"started", "succeeded"} {
		var got [][]string
		for _, r := range b.batchRows(t, all) {
			if r.Type == kind {
				got = append(got, r.Runs)
			}
		}
		if len(got) != 2 {
			t.Fatalf("%d %s rows for runs of two days, want 2: %v", len(got), kind, got)
		}
		for _, day := range []string{"2026-10-25", "2026-10-26"} {
			want := slices.Clone(spans[day])
			slices.Sort(want)
			if !slices.ContainsFunc(got, func(r []string) bool { return slices.Equal(r, want) }) {
				t.Fatalf("no %s row names exactly the runs of %s (%v): %v", kind, day, want, got)
			}
		}
	}
}
