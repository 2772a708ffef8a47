// Package peer builds and runs the benchmarks of the systems the engine is
// measured against (River, DBOS), each a Go module of its own under hack/ so
// that the project's go.mod does not carry them, against a database of
// their own on the server the engine's measurement uses.
package peer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// Binary is a peer's benchmark (the module hack/<Name>), built into a
// temporary directory, and the database it runs against.
type Binary struct {
	// Name is the module's directory under hack/.
	Name string
	// URL names the peer's database.
	URL string
	dir string // holds the built binary
	bin string
}

// Build builds the module hack/<name> (its dependencies come through the
// Go module proxy on first use) and creates the database db on the server
// of serverURL when it is missing.
func Build(ctx context.Context, serverURL, name, db string) (Binary, error) {
	src, err := pgtest.RepoFile(filepath.Join("hack", name))
	if err != nil {
		return Binary{}, fmt.Errorf("find hack/%s: %w", name, err)
	}
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return Binary{}, fmt.Errorf("temp dir: %w", err)
	}
	p := Binary{Name: name, dir: dir, bin: filepath.Join(dir, name)}
	build := exec.CommandContext(ctx, "go", "build", "-o", p.bin, ".")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		p.Close()
		return Binary{}, fmt.Errorf("build hack/%s: %w\n%s", name, err, out)
	}
	if p.URL, err = pgtest.WithDatabase(serverURL, db); err != nil {
		p.Close()
		return Binary{}, err
	}
	if err := CreateDatabase(ctx, serverURL, db); err != nil {
		p.Close()
		return Binary{}, err
	}
	return p, nil
}

// Close removes the built binary.
func (p Binary) Close() { _ = os.RemoveAll(p.dir) }

// Run runs the binary with args against its database and returns its
// standard output and standard error.
func (p Binary) Run(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var out bytes.Buffer
	errOut, err := p.Stream(ctx, &out, args...)
	if err != nil {
		return "", "", err
	}
	return out.String(), errOut, nil
}

// Stream runs the binary with args against its database, writing its
// standard output to w as it comes, and returns its standard error.
func (p Binary) Stream(ctx context.Context, w io.Writer, args ...string) (stderr string, err error) {
	cmd := exec.CommandContext(ctx, p.bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+p.URL)
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %v: %w\n%s", p.Name, args, err, errOut.Bytes())
	}
	return errOut.String(), nil
}

// CreateDatabase creates the database name on the server of serverURL
// unless it exists.
func CreateDatabase(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connect to create %s: %w", name, err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "select exists (select 1 from pg_database where datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "create database "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}
