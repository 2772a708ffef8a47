package engine_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// psql runs the server's psql on url with the files given, stopping at the
// first error, and returns its output and error.
func psql(t *testing.T, url string, args ...string) (string, error) {
	t.Helper()
	bin := "psql"
	if matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql"); len(matches) > 0 {
		bin = matches[len(matches)-1]
	}
	cmd := exec.Command(bin, append([]string{"-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// schemaPath is the path of a file of internal/engine/sql.
func schemaPath(t *testing.T, rel string) string {
	t.Helper()
	p, err := pgtest.RepoFile(filepath.Join("internal", "engine", "sql", rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// versionRows lists workflow.schema_version's versions in order.
func versionRows(t *testing.T, b *bundle) string {
	t.Helper()
	var got string
	if err := b.pool.QueryRow(b.ctx,
		"select coalesce(string_agg(version::text, ',' order by version), '') from workflow.schema_version").Scan(&got); err != nil {
		t.Fatal(err)
	}
	return got
}

// Without the SDK: psql installs the file on an empty database, upgrades
// an earlier release with its migrations and the file in one transaction,
// and any role asks the version. Each gives the catalog of engine.Migrate's
// fresh install.
func TestPsqlInstallsUpgradesAndAsksTheVersion(t *testing.T) {
	t.Parallel()
	target, err := engine.SchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	want := catalog(t, setup(t).url)

	t.Run("install", func(t *testing.T) {
		b := setup(t)
		if _, err := b.pool.Exec(b.ctx, "drop schema workflow cascade"); err != nil {
			t.Fatal(err)
		}
		if out, err := psql(t, b.url, "--single-transaction", "-f", schemaPath(t, "workflow.sql")); err != nil {
			t.Fatalf("psql install: %v\n%s", err, out)
		}
		if got := versionRows(t, b); got != fmt.Sprint(target) {
			t.Fatalf("versions recorded %q, want %d", got, target)
		}
		if got := catalog(t, b.url); got != want {
			t.Fatalf("psql's install differs from engine.Migrate's at %s", firstDifference(want, got))
		}
	})

	t.Run("upgrade", func(t *testing.T) {
		migrations, err := engine.Migrations()
		if err != nil {
			t.Fatal(err)
		}
		// From two releases back: two migrations, then the file.
		first := migrations[len(migrations)-2]
		from := fromLine.FindStringSubmatch(first.SQL)
		if from == nil {
			t.Fatalf("migration %04d names no release", first.Version)
		}
		b := setup(t)
		installRelease(t, b, first.Version-1, from[2])
		// A release before the version function is read from its table.
		if v, err := engine.InstalledSchemaVersion(b.ctx, b.pool); err != nil || v != first.Version-1 {
			t.Fatalf("InstalledSchemaVersion of release %d: %d, %v", first.Version-1, v, err)
		}
		// The next migration alone over it: refused, as its first statement checks.
		if out, err := psql(t, b.url, "--single-transaction", "-f",
			schemaPath(t, fmt.Sprintf("migrations/%04d_%s.sql", migrations[len(migrations)-1].Version, migrations[len(migrations)-1].Name))); err == nil ||
			!strings.Contains(out, fmt.Sprintf("upgrades version %d", target-1)) {
			t.Fatalf("the last migration over release %d: %v\n%s", first.Version-1, err, out)
		}
		args := []string{"--single-transaction"}
		for _, m := range migrations[len(migrations)-2:] {
			args = append(args, "-f", schemaPath(t, fmt.Sprintf("migrations/%04d_%s.sql", m.Version, m.Name)))
		}
		args = append(args, "-f", schemaPath(t, "workflow.sql"))
		if out, err := psql(t, b.url, args...); err != nil {
			t.Fatalf("psql upgrade: %v\n%s", err, out)
		}
		if got, want := versionRows(t, b), fmt.Sprintf("%d,%d,%d", target-2, target-1, target); got != want {
			t.Fatalf("versions recorded %q, want %q", got, want)
		}
		if got := catalog(t, b.url); got != want {
			t.Fatalf("psql's upgrade differs from a fresh install at %s", firstDifference(want, got))
		}
	})

	t.Run("every role asks", func(t *testing.T) {
		b := setup(t)
		if err := engine.CreateRoles(b.ctx, b.pool); err != nil {
			t.Fatal(err)
		}
		for _, role := range []string{"workflow_worker", "workflow_producer", "workflow_reader"} {
			tx, err := b.pool.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			var v int
			if _, err := tx.Exec(b.ctx, "set local role "+role); err != nil {
				t.Fatal(err)
			}
			if err := tx.QueryRow(b.ctx, "select workflow.schema_version()").Scan(&v); err != nil || v != target {
				t.Errorf("%s asks the version: %d, %v; want %d", role, v, err, target)
			}
			_ = tx.Rollback(b.ctx)
		}
		v, err := engine.InstalledSchemaVersion(b.ctx, b.pool)
		if err != nil || v != target {
			t.Fatalf("InstalledSchemaVersion: %d, %v; want %d", v, err, target)
		}
	})
}

// The file refuses, with a sentence that says what to do and without
// changing anything, to run outside one transaction, over a database
// whose migrations did not run, over a newer one, and over a version table
// with a gap.
func TestSchemaFileRefusesWhatWouldBreakTheDatabase(t *testing.T) {
	t.Parallel()
	target, err := engine.SchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	file := schemaPath(t, "workflow.sql")
	for _, c := range []struct {
		name  string
		setup []string // run before the file, as the owner
		args  []string
		want  string
	}{
		{
			name: "statement by statement",
			want: "must run whole in one transaction",
		},
		{
			name:  "migrations not run",
			setup: []string{fmt.Sprintf("delete from workflow.schema_version where version = %d", target), fmt.Sprintf("insert into workflow.schema_version values (%d)", target-1)},
			args:  []string{"--single-transaction"},
			want:  fmt.Sprintf("is at version %d: run migrations %d to %d before this file", target-1, target, target),
		},
		{
			name:  "a newer database",
			setup: []string{fmt.Sprintf("insert into workflow.schema_version values (%d)", target+1)},
			args:  []string{"--single-transaction"},
			want:  fmt.Sprintf("is at version %d, newer than this file (version %d)", target+1, target),
		},
		{
			name:  "a schema with no recorded version",
			setup: []string{"delete from workflow.schema_version"},
			args:  []string{"--single-transaction"},
			want:  "has no recorded version",
		},
		{
			name:  "a migration skipped",
			setup: []string{fmt.Sprintf("update workflow.schema_version set version = %d", target-2), fmt.Sprintf("insert into workflow.schema_version values (%d)", target)},
			args:  []string{"--single-transaction"},
			want:  fmt.Sprintf("skips a version between %d and %d", target-2, target),
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			for _, sql := range c.setup {
				if _, err := b.pool.Exec(b.ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			// A function of the schema, given a setting the file's "create or
			// replace" would take away if it ran.
			if _, err := b.pool.Exec(b.ctx, `alter function workflow.schema_version() set work_mem = '1234kB'`); err != nil {
				t.Fatal(err)
			}
			before := versionRows(t, b)
			out, err := psql(t, b.url, append(c.args, "-f", file)...)
			if err == nil || !strings.Contains(out, c.want) {
				t.Fatalf("psql: %v; want a failure saying %q, got:\n%s", err, c.want, lastLines(out, 5))
			}
			if got := versionRows(t, b); got != before {
				t.Fatalf("versions %q after the refusal, %q before", got, before)
			}
			if c.args == nil {
				return // statement by statement: what ran before the refusal stays, by definition
			}
			var kept bool
			if err := b.pool.QueryRow(b.ctx, `select 'work_mem=1234kB' = any (proconfig) from pg_proc
				where oid = 'workflow.schema_version()'::regprocedure`).Scan(&kept); err != nil || !kept {
				t.Fatalf("the refused file changed the schema (the setting kept: %v, %v)", kept, err)
			}
		})
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
