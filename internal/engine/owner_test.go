package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/console"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// The whole documented install as a dedicated owner that is
// not a superuser (what docs/security.md recommends): the migrations, the
// roles script, a worker, a producer and the console, each as its own login.
// Before, the migrations stopped at 0009 with "permission denied to set
// parameter workflow.via_function".
func TestInstallAsNonSuperuserOwner(t *testing.T) {
	t.Parallel()
	b := setup(t) // a superuser's connection, used only to make the owner and its database
	owner := "sw_owner_" + randomID()
	password := randomID() + randomID()
	db := "sw_owned_" + randomID()
	admin := func(sql string) {
		t.Helper()
		if _, err := b.pool.Exec(b.ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	admin(fmt.Sprintf("create role %s login password '%s' nosuperuser createrole", pgx.Identifier{owner}.Sanitize(), password))
	admin(fmt.Sprintf("create database %s owner %s template template0", pgx.Identifier{db}.Sanitize(), pgx.Identifier{owner}.Sanitize()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, sql := range []string{
			"drop database if exists " + pgx.Identifier{db}.Sanitize() + " with (force)",
			"drop owned by " + pgx.Identifier{owner}.Sanitize(),
			"drop role if exists " + pgx.Identifier{owner}.Sanitize(),
		} {
			if _, err := b.pool.Exec(ctx, sql); err != nil {
				t.Logf("%s: %v", sql, err)
			}
		}
	})

	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	u.User = url.UserPassword(owner, password)
	ownerURL := u.String()
	pool := openPool(t, ownerURL)
	var super bool
	if err := pool.QueryRow(b.ctx, "select rolsuper from pg_roles where rolname = current_user").Scan(&super); err != nil || super {
		t.Fatalf("the owner is a superuser (%v)", err)
	}
	if _, err := engine.Migrate(b.ctx, pool); err != nil {
		t.Fatalf("migrate as a non-superuser owner: %v", err)
	}
	if err := engine.CreateRoles(b.ctx, pool); err != nil {
		t.Fatalf("roles as a non-superuser owner: %v", err)
	}

	// Logins for a producer, a worker and a console, made by the owner
	// (CREATEROLE), as an administrator would.
	login := func(role string) *pgxpool.Pool {
		name := "sw_" + role + "_" + randomID()
		pw := randomID() + randomID()
		if _, err := pool.Exec(b.ctx, fmt.Sprintf("create role %s login password '%s' in role %s",
			pgx.Identifier{name}.Sanitize(), pw, pgx.Identifier{role}.Sanitize())); err != nil {
			t.Fatalf("create login for %s: %v", role, err)
		}
		// Bound by the owner to the namespace it acts on.
		if _, err := pool.Exec(b.ctx, "select workflow.grant_namespace($1, 'default', $2)", name, capacityOf(role)); err != nil {
			t.Fatalf("bind %s to namespace default: %v", name, err)
		}
		t.Cleanup(func() {
			if _, err := b.pool.Exec(context.Background(), "drop role if exists "+pgx.Identifier{name}.Sanitize()); err != nil {
				t.Logf("drop %s: %v", name, err)
			}
		})
		lu := *u
		lu.User = url.UserPassword(name, pw)
		return openPool(t, lu.String())
	}
	producer := login(engine.RoleProducer)
	worker, err := engine.New(login(engine.RoleWorker))
	if err != nil {
		t.Fatal(err)
	}

	var id string
	if err := producer.QueryRow(b.ctx, seedInsert).Scan(&id); err != nil {
		t.Fatalf("the seed insert as a producer: %v", err)
	}
	claimed, err := worker.ClaimRuns(b.ctx, engine.ClaimParams{WorkerID: "w", TypePrefixes: []string{"content."}, Limit: 10, LeaseDuration: 30 * time.Second})
	if err != nil || len(claimed) != 1 || claimed[0].ID != id {
		t.Fatalf("claim as a worker: %+v, %v", claimed, err)
	}
	done, err := worker.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: claimed[0].Ref(), Result: json.RawMessage(`{"ok":true}`)}})
	if err != nil || len(done) != 1 || done[0].Status != engine.StatusSucceeded {
		t.Fatalf("complete as a worker: %+v, %v", done, err)
	}

	// The console reads as workflow_reader through the owner's login (its
	// default), which the roles script made a member.
	cp, err := console.OpenPool(b.ctx, ownerURL, engine.RoleReader)
	if err != nil {
		t.Fatalf("the console as the owner: %v", err)
	}
	t.Cleanup(cp.Close)
	var status string
	if err := cp.QueryRow(b.ctx, "select status from workflow.workflow_run where id = $1", id).Scan(&status); err != nil || status != "succeeded" {
		t.Fatalf("the console reads %q (%v)", status, err)
	}

	// The functions mark their writes without a SET clause: a status the
	// worker wrote has no plain_sql event, a status changed by plain SQL
	// has one.
	evs, err := engine.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	trail, err := evs.ListEvents(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range trail {
		if containsPlainSQL(e.Data) {
			t.Fatalf("a function's write was audited as plain SQL: %s %s", e.Type, e.Data)
		}
	}
	// ... and the mark ends with the function: a plain UPDATE after a
	// function call in the same transaction is audited as plain SQL.
	var other string
	if err := producer.QueryRow(b.ctx, `insert into workflow.workflow_run (type, payload) values ('content.other.v1', '{}') returning id`).Scan(&other); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	if _, err := tx.Exec(b.ctx, "select * from workflow.reap_expired_leases(10)"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, "update workflow.workflow_run set status = 'failed', finished_at = now() where id = $1", other); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	trail, err = evs.ListEvents(b.ctx, other)
	if err != nil || len(trail) != 2 || !containsPlainSQL(trail[1].Data) {
		t.Fatalf("the plain UPDATE after a function call: %+v, %v", trail, err)
	}
}

func containsPlainSQL(data json.RawMessage) bool {
	var m map[string]any
	return json.Unmarshal(data, &m) == nil && m["reason"] == "plain_sql"
}

func openPool(t *testing.T, u string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
