package simpleworkflow_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// The transactional outbox: the order and the run that ships it are written
// in one transaction, so there is never an order without its run, nor a run
// for an order that was rolled back.
func ExampleClient_CreateIn() {
	ctx := context.Background()
	client, err := simpleworkflow.Connect(ctx, databaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	pool := client.Pool()
	if _, err := pool.Exec(ctx, `create table orders (id int primary key, run_id uuid not null)`); err != nil {
		log.Fatal(err)
	}

	placeOrder := func(id int, fail bool) (string, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return "", err
		}
		defer tx.Rollback(ctx) // a no-op once committed
		run, err := client.CreateIn(ctx, tx, "shop.ship.v1", map[string]any{"order": id}, nil)
		if err != nil {
			return "", err
		}
		if _, err := tx.Exec(ctx, `insert into orders values ($1, $2)`, id, run.ID); err != nil {
			return "", err
		}
		if fail {
			return run.ID, errors.New("payment declined") // rolled back: no order, no run
		}
		return run.ID, tx.Commit(ctx)
	}

	shipped, err := placeOrder(1, false)
	if err != nil {
		log.Fatal(err)
	}
	declined, err := placeOrder(2, true)
	fmt.Println("order 2:", err)

	for _, id := range []string{shipped, declined} {
		run, err := client.Get(ctx, id)
		if errors.Is(err, simpleworkflow.ErrNotFound) {
			fmt.Println("run absent")
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("run", run.Status)
	}
	// Output:
	// order 2: payment declined
	// run pending
	// run absent
}
