package controller

import (
	"context"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Inbox is what the reconcilers need from the durable inbox. *engine.Engine
// implements it.
type Inbox interface {
	CreateRun(ctx context.Context, p engine.CreateParams) (engine.CreateResult, error)
	GetRun(ctx context.Context, id string) (engine.Run, error)
	FindRunByIdempotencyKey(ctx context.Context, key string) (string, error)
	CancelRunAs(ctx context.Context, id, by string) (bool, error)
	RetryRun(ctx context.Context, p engine.RetryParams) error
	ListEventsAfter(ctx context.Context, runID string, afterID int64) ([]engine.Event, error)
	SendSignal(ctx context.Context, p engine.SignalParams) (engine.SignalResult, error)
	ListSignals(ctx context.Context, runID string) ([]engine.Signal, error)
	SummarizeSteps(ctx context.Context, runID string) (engine.StepSummary, error)
	ListChildren(ctx context.Context, parentID string, limit int) ([]engine.ChildRun, error)
	DAGSteps(ctx context.Context, runID string) ([]engine.DAGStep, error)
	GetRegistryEntry(ctx context.Context, namespace, name string) (engine.RegistryEntry, error)
	UpsertRegistryEntry(ctx context.Context, r engine.RegistryEntry) error
	DeleteRegistryEntry(ctx context.Context, name, ownerNamespace, ownerName string) (bool, error)
	ListRegistryEntriesByOwner(ctx context.Context, ownerNamespace, ownerName string) ([]engine.RegistryEntry, error)
}

var _ Inbox = (*engine.Engine)(nil)
