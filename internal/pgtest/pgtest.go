// Package pgtest gives tests a real, migrated Postgres database of their own.
//
// A test package calls Main from TestMain. Main uses the server named by
// TEST_DATABASE_URL or DATABASE_URL when one is set; otherwise it starts a
// throwaway cluster with hack/pg.sh and stops it when the tests end (the
// script also stops it if the test binary is killed). Main migrates a template
// database once; NewDatabase clones it for each test, so tests and packages run
// in parallel without seeing each other's rows.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Environment variables Main sets for NewDatabase (and child processes).
const (
	envServerURL = "SIMPLE_WORKFLOW_TEST_SERVER_URL"
	envTemplate  = "SIMPLE_WORKFLOW_TEST_TEMPLATE_DB"
)

// Main starts (or finds) the server, prepares the template database, runs the
// tests and cleans up. Use it as os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	ctx := context.Background()
	serverURL := os.Getenv("TEST_DATABASE_URL")
	if serverURL == "" {
		serverURL = os.Getenv("DATABASE_URL")
	}
	if serverURL == "" {
		u, stop, err := StartServer(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			return 1
		}
		defer stop()
		serverURL = u
	}
	template := "sw_tmpl_" + randomSuffix()
	if err := createTemplate(ctx, serverURL, template); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	defer func() {
		if err := exec1(ctx, serverURL, "drop database if exists "+pgx.Identifier{template}.Sanitize()+" with (force)"); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: drop template: %v\n", err)
		}
	}()
	os.Setenv(envServerURL, serverURL)
	os.Setenv(envTemplate, template)
	return m.Run()
}

// StartServer starts a throwaway cluster with hack/pg.sh and returns its URL
// and a function that stops it.
func StartServer(ctx context.Context) (string, func(), error) {
	c, err := StartCluster(ctx)
	if err != nil {
		return "", nil, err
	}
	return c.URL, c.Stop, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// RepoFile returns the absolute path of a file given relative to the
// repository root, found by walking up from the working directory to go.mod.
func RepoFile(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "hack", "pg.sh")); err == nil {
				return filepath.Join(dir, rel), nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("repository root (go.mod beside hack/pg.sh) not found above the working directory")
		}
		dir = parent
	}
}

func createTemplate(ctx context.Context, serverURL, name string) error {
	if err := exec1(ctx, serverURL, "create database "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create template database: %w", err)
	}
	u, err := WithDatabase(serverURL, name)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return fmt.Errorf("connect to template: %w", err)
	}
	defer pool.Close()
	if _, err := engine.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	return nil
}

func exec1(ctx context.Context, serverURL, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(serverURL), err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

// WithDatabase returns serverURL with its database name replaced.
func WithDatabase(serverURL, db string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	u.Path = "/" + db
	return u.String(), nil
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// CreateDatabase creates a migrated database from the template prepared by
// Main and returns its URL and a function that drops it.
func CreateDatabase(ctx context.Context) (string, func() error, error) {
	serverURL, template := os.Getenv(envServerURL), os.Getenv(envTemplate)
	if serverURL == "" || template == "" {
		return "", nil, fmt.Errorf("pgtest: call pgtest.Main from TestMain")
	}
	name := "sw_test_" + randomSuffix()
	sql := "create database " + pgx.Identifier{name}.Sanitize() + " template " + pgx.Identifier{template}.Sanitize()
	var err error
	for range 20 { // the template can be busy for a moment while another clone starts
		if err = exec1(ctx, serverURL, sql); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return "", nil, fmt.Errorf("pgtest: create database: %w", err)
	}
	drop := func() error {
		return exec1(context.WithoutCancel(ctx), serverURL, "drop database if exists "+pgx.Identifier{name}.Sanitize()+" with (force)")
	}
	u, err := WithDatabase(serverURL, name)
	if err != nil {
		return "", nil, err
	}
	return u, drop, nil
}

// NewDatabase creates a migrated database for this test alone and returns
// its URL; it is dropped when the test ends. Main must be running the tests.
func NewDatabase(t testing.TB) string {
	t.Helper()
	u, drop, err := CreateDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Logf("pgtest: drop database: %v", err)
		}
	})
	return u
}

// NewPool returns a pool connected to a new database (see NewDatabase) and
// its URL; the pool is closed when the test ends.
func NewPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	u := NewDatabase(t)
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("pgtest: parse URL: %v", err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, u
}
