package simpleworkflow_test

import (
	"context"
	"fmt"
	"log"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// A producer records a batch in one round trip. Idempotency keys work per
// run: the second "invoice:42" gets the first one's run back.
func ExampleClient_CreateMany() {
	ctx := context.Background()
	client, err := simpleworkflow.Connect(ctx, databaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	key := func(k string) *simpleworkflow.CreateOptions { return &simpleworkflow.CreateOptions{IdempotencyKey: k} }
	res, err := client.CreateMany(ctx, []simpleworkflow.NewRun{
		{Type: "billing.invoice.v1", Payload: map[string]any{"order": 42}, Options: key("invoice:42")},
		{Type: "billing.invoice.v1", Payload: map[string]any{"order": 43}, Options: key("invoice:43")},
		{Type: "billing.invoice.v1", Payload: map[string]any{"order": 42}, Options: key("invoice:42")},
		{Type: "notify.email.v1", Payload: map[string]any{"to": "ops@example.com"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range res {
		fmt.Print(r.Created, " ")
	}
	fmt.Println(res[2].ID == res[0].ID)
	// Output: true true false true true
}
