package simpleworkflow_test

import (
	"context"
	"math"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// The fence a span carries is the one the database keeps for the token.
func TestLeaseFenceIsTheDatabases(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	for _, token := range []int64{1, -1, 1<<62 + 5, math.MinInt64, math.MaxInt64} {
		var want int64
		if err := pool.QueryRow(context.Background(), "select workflow.lease_fence($1)", token).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got := simpleworkflow.LeaseFence(token); got != want {
			t.Errorf("fence of %d: %d, the database's %d", token, got, want)
		}
	}
}
