package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// catalog dumps the workflow schema of a database (tables, constraints,
// indexes, functions, triggers, comments, privileges) with pg_dump, without
// the lines that differ between two dumps of one schema.
func catalog(t *testing.T, url string) string {
	t.Helper()
	pgDump := findPgDump(t)
	out, err := exec.Command(pgDump, "--schema-only", "--schema=workflow", "--no-owner", url).Output()
	if err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	var keep []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "--") || strings.HasPrefix(line, `\`) || strings.TrimSpace(line) == "" {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

// findPgDump finds the pg_dump of the server the tests run against.
func findPgDump(t *testing.T) string {
	t.Helper()
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump")
	if len(matches) > 0 {
		return matches[len(matches)-1]
	}
	p, err := exec.LookPath("pg_dump")
	if err != nil {
		t.Fatalf("pg_dump not found (install the postgresql package): %v", err)
	}
	return p
}

// firstDifference reports the first line where two catalogs differ.
func firstDifference(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(la) || i < len(lb); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  fresh:    %s\n  upgraded: %s", i+1, x, y)
		}
	}
	return ""
}

// The file runs again on a database it installed and changes nothing: an
// upgrade runs it over the previous release's objects.
func TestSchemaFileRunsAgainWithoutChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := catalog(t, b.url)
	if _, err := b.pool.Exec(b.ctx, engine.Schema()); err != nil {
		t.Fatalf("the schema file does not run again: %v", err)
	}
	if after := catalog(t, b.url); after != before {
		t.Fatalf("running the schema file again changed the catalog at %s", firstDifference(before, after))
	}
}

var fromLine = regexp.MustCompile(`(?m)^-- from: version ([0-9]+) at ([0-9a-f]{7,40})$`)

// Every earlier release (its schema file as it was at the commit its
// successor's migration names), upgraded through every migration after it
// and the current file, gives the catalog of a fresh install: functions an
// earlier file had and the current one does not are gone.
func TestUpgradeFromPreviousReleaseMatchesFreshInstall(t *testing.T) {
	t.Parallel()
	migrations, err := engine.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	fresh := setup(t)
	want := catalog(t, fresh.url)
	if len(migrations) == 0 {
		t.Skip("the schema file is the first release: nothing to upgrade from")
	}
	// Every release: a database of any earlier version upgrades through
	// each migration after it and then the file.
	latest := migrations[len(migrations)-1].Version
	for _, m := range migrations {
		t.Run(fmt.Sprintf("%04d_%s", m.Version, m.Name), func(t *testing.T) {
			from := fromLine.FindStringSubmatch(m.SQL)
			if from == nil || from[1] != fmt.Sprint(m.Version-1) {
				t.Fatalf("the migration must name the release it upgrades: a line \"-- from: version %d at <commit>\"", m.Version-1)
			}
			b := setup(t)
			installRelease(t, b, m.Version-1, from[2])
			applied, err := engine.Migrate(b.ctx, b.pool)
			if err != nil {
				t.Fatal(err)
			}
			if len(applied) != latest-m.Version+1 || applied[0] != m.Version {
				t.Fatalf("applied %v, want versions %d to %d", applied, m.Version, latest)
			}
			if got := catalog(t, b.url); got != want {
				t.Fatalf("upgraded catalog differs from a fresh install at %s", firstDifference(want, got))
			}
		})
	}
}

// installRelease replaces the test database's schema with the schema file
// of a release (as it was at a commit), recorded at its version.
func installRelease(t *testing.T, b *bundle, version int, commit string) {
	t.Helper()
	previous := fileAtCommit(t, commit, "internal/engine/sql/workflow.sql")
	if _, err := b.pool.Exec(b.ctx, "drop schema workflow cascade"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, previous); err != nil {
		t.Fatalf("install version %d: %v", version, err)
	}
	// Releases before version 16 left the version table to engine.Migrate;
	// later ones make it and record their version themselves.
	if _, err := b.pool.Exec(b.ctx, `create table if not exists workflow.schema_version (
		version integer primary key, applied_at timestamptz not null default now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, "insert into workflow.schema_version (version) values ($1) on conflict do nothing", version); err != nil {
		t.Fatal(err)
	}
}

// fileAtCommit reads a file as it was at a commit of this repository.
func fileAtCommit(t *testing.T, commit, path string) string {
	t.Helper()
	root, err := pgtest.RepoFile(".")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), "git", "-C", root, "show", commit+":"+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git show %s:%s: %v: %s (the test needs the repository's history: clone without --depth)",
			commit, path, err, stderr.String())
	}
	return string(out)
}

// No function is defined twice anywhere in the tree: the schema file holds
// each, and migrations only change tables.
func TestEveryFunctionIsDefinedOnce(t *testing.T) {
	t.Parallel()
	root, err := pgtest.RepoFile(".")
	if err != nil {
		t.Fatal(err)
	}
	define := regexp.MustCompile(`(?i)create\s+(or\s+replace\s+)?function\s+workflow\.(\w+)`)
	seen := map[string]string{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".sql") {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range define.FindAllStringSubmatch(string(text), -1) {
			if prev, ok := seen[m[2]]; ok {
				t.Errorf("workflow.%s is defined in %s and again in %s", m[2], prev, rel)
			}
			seen[m[2]] = rel
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 40 {
		t.Fatalf("found %d functions; the walk missed the schema file", len(seen))
	}
}

// An upgrade drops the routines of schema workflow that the file no longer
// defines, together (one calling another is no obstacle), an aggregate
// among them, and keeps what the file defines.
func TestUpgradeDropsWhatTheFileNoLongerDefines(t *testing.T) {
	t.Parallel()
	b := setup(t)
	version, err := engine.SchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		// Sorted by signature, the callee comes first: dropped alone, it
		// would fail for the function that depends on it.
		`create function workflow.a_gone_helper(integer) returns integer language sql immutable return $1 + 1`,
		`create function workflow.b_gone_caller(integer) returns integer language sql immutable
			return workflow.a_gone_helper($1)`,
		`create aggregate workflow.c_gone_sum(integer) (sfunc = int4pl, stype = integer)`,
		`create procedure workflow.d_gone_step() language sql as 'select 1'`,
		`update workflow.schema_version set version = version - 1 where version = ` + fmt.Sprint(version),
	} {
		if _, err := b.pool.Exec(b.ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	applied, err := engine.Migrate(b.ctx, b.pool)
	if err != nil || len(applied) != 1 || applied[0] != version {
		t.Fatalf("migrate: applied %v, %v; want [%d]", applied, err, version)
	}
	rows, err := b.pool.Query(b.ctx, `select proname::text from pg_proc
		where pronamespace = 'workflow'::regnamespace and proname like '%gone%' order by 1`)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("routines the file does not define survived the upgrade: %v", left)
	}
	var kept bool
	if err := b.pool.QueryRow(b.ctx, `select to_regprocedure('workflow.claim_runs(text, text[], text, integer, bigint, text[], text, uuid[], boolean)') is not null`).Scan(&kept); err != nil || !kept {
		t.Fatalf("claim_runs is gone after the upgrade (%v)", err)
	}
}

// Every function of the schema file opens with a comment that says what it
// does: the file is read top to bottom, and a function without one is where
// a reader stops.
func TestEveryFunctionHasAHeaderComment(t *testing.T) {
	t.Parallel()
	lines := strings.Split(engine.Schema(), "\n")
	functions := 0
	for i, line := range lines {
		if !strings.HasPrefix(line, "create or replace function ") {
			continue
		}
		functions++
		j := i - 1
		for j >= 0 && strings.TrimSpace(lines[j]) == "" {
			j--
		}
		if j < 0 || !strings.HasPrefix(lines[j], "--") {
			t.Errorf("line %d: %s has no header comment", i+1, strings.TrimSuffix(line, "("))
		}
	}
	if functions < 40 {
		t.Fatalf("found %d functions; the file was not read whole", functions)
	}
}
