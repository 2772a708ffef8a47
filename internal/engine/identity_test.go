package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// A database's identity is the same through any address that reaches it,
// and differs between two databases of one server.
func TestDatabaseIdentityNamesTheDatabaseNotTheURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, urlA := pgtest.NewPool(t)
	b, _ := pgtest.NewPool(t)
	idA, err := engine.DatabaseIdentity(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	idB, err := engine.DatabaseIdentity(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if idA == "" || idA == idB {
		t.Fatalf("two databases: identities %q and %q", idA, idB)
	}
	other := strings.Replace(urlA, "127.0.0.1", "localhost", 1)
	if other == urlA {
		t.Fatalf("the test URL %q names no 127.0.0.1 to write otherwise", urlA)
	}
	again, err := pgxpool.New(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	idAgain, err := engine.DatabaseIdentity(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if idAgain != idA {
		t.Fatalf("one database through two addresses: %q and %q", idA, idAgain)
	}
}
