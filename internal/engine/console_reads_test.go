package engine_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// The console's reads of a viewer's namespaces (finished_last_hour and
// list_runs_newest with p_namespaces) show those namespaces' runs and no
// other team's, whatever the list holds: nothing, a null, names that differ
// from another team's by a space, a wildcard or a quote, a name of 100,000
// characters, 10,000 names. A NUL is refused by the database before any
// read. Another team's runs are counted and listed for a viewer of that
// team, unchanged.
func TestConsoleReadsShowOnlyTheNamespacesGiven(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, ns := range []string{"team-a", "team-b"} {
		b.create(t, engine.CreateParams{Type: strings.ReplaceAll(ns, "-", "") + ".job.v1",
			Source: &engine.Source{Namespace: ns, Name: "run", UID: "uid-" + ns}})
	}
	for _, ns := range []string{"team-a", "team-b"} {
		b.completeAll(t, "w", b.claimIn(t, ns, "w", []string{"team"}, 10))
	}

	// The types of what a read shows to a viewer of namespaces.
	types := func(what, query string, namespaces any) []string {
		t.Helper()
		rows, err := b.pool.Query(b.ctx, query, namespaces)
		if err != nil {
			t.Fatalf("%s(%.60v): %v", what, namespaces, err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	finished := func(namespaces any) []string {
		t.Helper()
		return types("finished_last_hour",
			`select distinct type from workflow.finished_last_hour($1::text[]) order by 1`, namespaces)
	}
	listed := func(namespaces any) []string {
		t.Helper()
		return types("list_runs_newest", `select type from workflow.list_runs_newest(null, null, null, $1::text[],
			null, null, null, null, 50) order by 1`, namespaces)
	}

	many := make([]string, 10000)
	for i := range many {
		many[i] = "team-" + strings.Repeat("x", i%50) + "'%_\\"
	}
	many[9999] = "team-a"
	for name, namespaces := range map[string]any{
		"team-a":            []string{"team-a"},
		"hostile names":     []string{"team-a", "team-b ", " team-b", "team-%", "team_b", "team-b'--", "TEAM-B", strings.Repeat("b", 100000)},
		"10,000 names":      many,
		"a null among them": []*string{nil, ptr("team-a")},
	} {
		if got := finished(namespaces); !slices.Equal(got, []string{"teama.job.v1"}) {
			t.Errorf("%s: finished in the last hour %v, want team-a's only", name, got)
		}
		if got := listed(namespaces); !slices.Equal(got, []string{"teama.job.v1"}) {
			t.Errorf("%s: listed %v, want team-a's only", name, got)
		}
	}
	for name, namespaces := range map[string]any{"no namespace": []string{}, "only a null": []*string{nil}} {
		if got := finished(namespaces); len(got) != 0 {
			t.Errorf("%s: finished in the last hour %v, want nothing", name, got)
		}
		if got := listed(namespaces); len(got) != 0 {
			t.Errorf("%s: listed %v, want nothing", name, got)
		}
	}
	if _, err := b.pool.Exec(b.ctx, `select * from workflow.finished_last_hour($1::text[])`, []string{"team-a\x00"}); err == nil {
		t.Error("a namespace holding a NUL was taken")
	}
	// The other team, read as itself, is whole.
	if got := finished([]string{"team-b"}); !slices.Equal(got, []string{"teamb.job.v1"}) {
		t.Errorf("team-b's runs finished in the last hour: %v", got)
	}
	if got := listed([]string{"team-b"}); !slices.Equal(got, []string{"teamb.job.v1"}) {
		t.Errorf("team-b's runs listed: %v", got)
	}
}
