package engine_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// runIDTime returns the creation time a run id carries in its first 48 bits.
func runIDTime(t *testing.T, id string) time.Time {
	t.Helper()
	hex := strings.ReplaceAll(id, "-", "")
	ms, err := strconv.ParseInt(hex[:12], 16, 64)
	if err != nil {
		t.Fatalf("run id %s: %v", id, err)
	}
	return time.UnixMilli(ms)
}

// Run ids are UUIDs of version 7's layout: the creation time in
// milliseconds first, so runs made later sort later in the primary key, and
// 74 random bits; a plain INSERT and create_runs draw them alike.
func TestRunIDsFollowCreationOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []string
	for range 3 {
		ids = append(ids, b.create(t, engine.CreateParams{Type: "ids.a.v1"}))
		time.Sleep(3 * time.Millisecond)
	}
	var batch []string
	if err := b.pool.QueryRow(b.ctx, `select array_agg(id::text order by ord)
		from workflow.create_runs(array['ids.b.v1', 'ids.b.v1'], array['{}', '{}'])`).Scan(&batch); err != nil {
		t.Fatal(err)
	}
	var plain string
	if err := b.pool.QueryRow(b.ctx, `insert into workflow.workflow_run (type) values ('ids.c.v1') returning id::text`).Scan(&plain); err != nil {
		t.Fatal(err)
	}
	all := append(append(ids, batch...), plain)
	seen := map[string]bool{}
	for i, id := range all {
		if !engine.IsRunID(id) || id[14] != '7' || !strings.ContainsRune("89ab", rune(id[19])) {
			t.Fatalf("run id %s is not a version 7 UUID", id)
		}
		if seen[id] {
			t.Fatalf("run id %s drawn twice", id)
		}
		seen[id] = true
		created := b.get(t, id).CreatedAt
		if d := runIDTime(t, id).Sub(created); d < -time.Second || d > time.Second {
			t.Fatalf("run id %s carries %s, the run was created at %s", id, runIDTime(t, id), created)
		}
		if i > 0 && i < len(ids) && id <= all[i-1] {
			t.Fatalf("run %s created after %s sorts before it", id, all[i-1])
		}
	}
	if plain <= ids[len(ids)-1] {
		t.Fatalf("a later plain INSERT's id %s sorts before %s", plain, ids[len(ids)-1])
	}
}

// The small SQL helpers on the hot path are inlined into the statements that
// call them: a helper the planner cannot inline has its body parsed and
// planned again in every statement (new_run_id for every inserted run,
// prefix_pattern for every claim by prefix, the step checks for every
// journal write). The ids and patterns they make are checked elsewhere;
// this checks that no plan calls them.
func TestHotPathHelpersAreInlined(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for helper, stmt := range map[string]string{
		"new_run_id":        `insert into workflow.workflow_run (type, payload) values ('inline.a.v1', '{}')`,
		"prefix_pattern":    `select array_agg(workflow.prefix_pattern(p)) from unnest(array['a.', 'b_%', null]) p`,
		"step_name_problem": `select workflow.step_name_problem(n) from unnest(array['ok', '', null]) n`,
		"output_problem":    `select workflow.output_problem(o) from unnest(array['{}'::jsonb, null]) o`,
		"traceparent_valid": `select workflow.traceparent_valid(p) from unnest(array['00-x', null]) p`,
		"json_too_deep":     `select workflow.json_too_deep(o) from unnest(array['{}'::jsonb, null]) o`,
		"result_problem":    `select workflow.result_problem(o) from unnest(array['{}'::jsonb, null]) o`,
	} {
		rows, err := b.pool.Query(b.ctx, "explain (verbose, costs off) "+stmt)
		if err != nil {
			t.Fatalf("%s: %v", helper, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", helper, err)
		}
		plan := strings.Join(lines, "\n")
		if strings.Contains(plan, helper+"(") {
			t.Errorf("workflow.%s is called, not inlined:\n%s", helper, plan)
		}
	}
	var patterns []*string
	if err := b.pool.QueryRow(b.ctx, `select array_agg(workflow.prefix_pattern(p) order by o)
		from unnest(array['a.', 'b_%', 'c\%', null]) with ordinality u(p, o)`).Scan(&patterns); err != nil {
		t.Fatal(err)
	}
	want := []string{`a.%`, `b\_%`, `c\\%`, ""}
	for i, p := range patterns {
		switch {
		case i == 3 && p != nil:
			t.Errorf("prefix_pattern(null) = %q, want null", *p)
		case i < 3 && (p == nil || *p != want[i]):
			t.Errorf("prefix_pattern of prefix %d = %v, want %q", i, p, want[i])
		}
	}
}
