package simpleworkflow_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

func TestClientCreateGetListCancelEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, err := b.client.Create(b.ctx, "content.thumbnail.v1", map[string]any{"content_id": "c_123"},
		&simpleworkflow.CreateOptions{IdempotencyKey: "content:c_123:thumbnail:300x300"})
	if err != nil || !first.Created {
		t.Fatalf("create: %+v %v", first, err)
	}
	again, err := b.client.Create(b.ctx, "content.thumbnail.v1", map[string]any{"content_id": "other"},
		&simpleworkflow.CreateOptions{IdempotencyKey: "content:c_123:thumbnail:300x300"})
	if err != nil || again.Created || again.ID != first.ID {
		t.Fatalf("idempotent create: %+v %v, want existing %s", again, err, first.ID)
	}
	run, err := b.client.Get(b.ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]string
	if err := json.Unmarshal(run.Payload, &payload); err != nil || payload["content_id"] != "c_123" {
		t.Fatalf("payload %s", run.Payload)
	}
	if _, err := b.client.Create(b.ctx, "content.thumbnail", nil, nil); !errors.Is(err, simpleworkflow.ErrInvalid) {
		t.Fatalf("bad type: %v, want ErrInvalid", err)
	}
	if _, err := b.client.Create(b.ctx, "content.thumbnail.v1", []int{1}, nil); !errors.Is(err, simpleworkflow.ErrInvalid) {
		t.Fatalf("array payload: %v, want ErrInvalid", err)
	}
	for range 3 {
		if _, err := b.client.Create(b.ctx, "notify.email.v1", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	page, err := b.client.List(b.ctx, simpleworkflow.ListOptions{TypePrefix: "notify.", Limit: 2})
	if err != nil || len(page.Runs) != 2 || page.NextCursor == "" {
		t.Fatalf("first page: %d runs, cursor %q, %v", len(page.Runs), page.NextCursor, err)
	}
	page, err = b.client.List(b.ctx, simpleworkflow.ListOptions{TypePrefix: "notify.", Limit: 2, Cursor: page.NextCursor})
	if err != nil || len(page.Runs) != 1 || page.NextCursor != "" {
		t.Fatalf("second page: %d runs, cursor %q, %v", len(page.Runs), page.NextCursor, err)
	}
	if ok, err := b.client.Cancel(b.ctx, first.ID); !ok || err != nil {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	assertTrail(t, b.events(t, first.ID), simpleworkflow.EventCreated, simpleworkflow.EventCancelled)
	if _, err := b.client.Get(b.ctx, "6f1c1f3e-0000-0000-0000-000000000000"); !errors.Is(err, simpleworkflow.ErrNotFound) {
		t.Fatalf("missing run: %v", err)
	}
}

func TestPollerConfigValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bad := []simpleworkflow.PollerConfig{
		{LeaseDuration: 100 * 1e6},
		{Runtime: "ruby"},
		{Concurrency: -1},
		{TypePrefixes: []string{""}},
		{HeartbeatInterval: 60 * 1e9},
	}
	for _, cfg := range bad {
		if _, err := simpleworkflow.NewPoller(b.client, cfg); !errors.Is(err, simpleworkflow.ErrInvalid) {
			t.Errorf("config %+v: %v, want ErrInvalid", cfg, err)
		}
	}
	p, err := simpleworkflow.NewPoller(b.client, simpleworkflow.PollerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Config()
	if c.LeaseDuration != simpleworkflow.DefaultLeaseDuration || c.Concurrency != simpleworkflow.DefaultConcurrency ||
		c.Runtime != "go" || c.WorkerID == "" || c.HeartbeatInterval != c.LeaseDuration/3 {
		t.Fatalf("defaults not applied: %+v", c)
	}
	if err := p.Handle("not-a-type", nil); !errors.Is(err, simpleworkflow.ErrInvalid) {
		t.Fatalf("bad handler type: %v", err)
	}
}
