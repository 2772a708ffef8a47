package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
)

// Runtimes a workflow type can be registered for.
const (
	RuntimeGo     = "go"
	RuntimePython = "python"
)

// RegistryEntry maps a workflow type to the runtime that executes it.
type RegistryEntry struct {
	WorkflowName string
	Runtime      string
	Enabled      bool
	Description  string
	// Owner names the WorkflowRegistry object that declared the entry, if
	// any. The entry belongs to the owner's namespace ("default" without
	// one): the same name in two namespaces is two types.
	OwnerNamespace string
	OwnerName      string
	// SharedWith lists the namespaces whose runs may run this type among
	// the owner namespace's workers (a run asks with its type namespace).
	SharedWith []string
	// Definition, when set, makes the type a DAG workflow orchestrated by
	// the database (see DAGDefinition); Runtime is then empty.
	Definition *DAGDefinition
	// Flow limits what the claim lets start (see FlowLimits); the zero
	// value sets none.
	Flow      FlowLimits
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ErrOwnedElsewhere is returned when a registry entry belongs to another owner.
var ErrOwnedElsewhere = errors.New("registered by another owner")

// UpsertRegistryEntry inserts or updates an entry. An entry that exists with a
// different owner is left alone and ErrOwnedElsewhere is returned: the first
// owner keeps it.
func (e *Engine) UpsertRegistryEntry(ctx context.Context, r RegistryEntry) error {
	if err := ValidateType(r.WorkflowName); err != nil {
		return fmt.Errorf("register workflow: %w", err)
	}
	if r.Definition == nil && r.Runtime != RuntimeGo && r.Runtime != RuntimePython {
		return fmt.Errorf("register workflow %s: %w: runtime must be go or python, got %q", r.WorkflowName, ErrInvalid, r.Runtime)
	}
	if r.Definition != nil && r.Runtime != "" {
		return fmt.Errorf("register workflow %s: %w: a workflow with steps has no runtime of its own (its steps' types have theirs)", r.WorkflowName, ErrInvalid)
	}
	if err := r.Flow.Validate(); err != nil {
		return fmt.Errorf("register workflow %s: %w", r.WorkflowName, err)
	}
	if r.Definition != nil && r.Flow.Limited() {
		return fmt.Errorf("register workflow %s: %w: flow limits apply to types that workers run, not to a workflow with steps (limit its steps' types)", r.WorkflowName, ErrInvalid)
	}
	var def []byte
	if r.Definition != nil {
		var err error
		if def, err = json.Marshal(r.Definition); err != nil {
			return fmt.Errorf("register workflow %s: encode definition: %w", r.WorkflowName, err)
		}
	}
	name, err := e.q.RegistryUpsert(ctx, queries.RegistryUpsertParams{
		WorkflowName: r.WorkflowName, Runtime: nullIfEmpty(r.Runtime), IsEnabled: r.Enabled,
		Description: r.Description, OwnerNamespace: nullIfEmpty(r.OwnerNamespace),
		OwnerName: nullIfEmpty(r.OwnerName), Definition: def, MaxLeased: r.Flow.MaxLeased,
		MaxLeasedPerKey: r.Flow.MaxLeasedPerKey, RateLimit: r.Flow.RateLimit, RatePeriodMs: ratePeriodMs(r.Flow),
		RatePerKey: r.Flow.RatePerKey, SharedWith: r.SharedWith,
	}) // name: null when another object owns the name
	if err == nil && name == nil {
		return fmt.Errorf("register workflow %s: %w", r.WorkflowName, ErrOwnedElsewhere)
	}
	return translate("register workflow "+r.WorkflowName, err)
}

// registryEntry is an entry as RegistryGet and RegistryListByOwner read it.
func registryEntry(row queries.RegistryGetRow) (RegistryEntry, error) {
	r := RegistryEntry{
		WorkflowName: deref(row.WorkflowName), Runtime: deref(row.Runtime), Enabled: deref(row.IsEnabled),
		Description: deref(row.Description), OwnerNamespace: deref(row.OwnerNamespace),
		OwnerName: deref(row.OwnerName), CreatedAt: deref(row.CreatedAt), UpdatedAt: deref(row.UpdatedAt),
		SharedWith: row.SharedWith,
	}
	r.Flow.MaxLeased, r.Flow.MaxLeasedPerKey, r.Flow.RateLimit = row.MaxLeased, row.MaxLeasedPerKey, row.RateLimit
	r.Flow.RatePerKey = deref(row.RatePerKey)
	if len(r.SharedWith) == 0 {
		r.SharedWith = nil
	}
	if row.RatePeriodMs != nil {
		r.Flow.RatePeriod = time.Duration(*row.RatePeriodMs) * time.Millisecond
	}
	if row.Definition != nil {
		r.Definition = new(DAGDefinition)
		if err := json.Unmarshal(row.Definition, r.Definition); err != nil {
			return r, fmt.Errorf("decode definition of %s: %w", r.WorkflowName, err)
		}
	}
	return r, nil
}

// ListRegistryEntriesByOwner returns the entries declared by one owner.
func (e *Engine) ListRegistryEntriesByOwner(ctx context.Context, ownerNamespace, ownerName string) ([]RegistryEntry, error) {
	rows, err := e.q.RegistryListByOwner(ctx, queries.RegistryListByOwnerParams{
		OwnerNamespace: ownerNamespace, OwnerName: ownerName,
	})
	if err != nil {
		return nil, translate("list registry entries", err)
	}
	out := make([]RegistryEntry, len(rows))
	for i, row := range rows {
		if out[i], err = registryEntry(queries.RegistryGetRow(row)); err != nil {
			return nil, fmt.Errorf("list registry entries: %w", err)
		}
	}
	return out, nil
}

// GetRegistryEntry returns namespace's entry for a workflow type ("" means
// "default"), or an error wrapping ErrNotFound.
func (e *Engine) GetRegistryEntry(ctx context.Context, namespace, name string) (RegistryEntry, error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	row, err := e.q.RegistryGet(ctx, queries.RegistryGetParams{WorkflowName: name, Namespace: namespace})
	if errors.Is(err, pgx.ErrNoRows) {
		return RegistryEntry{}, fmt.Errorf("registry entry %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return RegistryEntry{}, translate("registry entry "+name, err)
	}
	r, err := registryEntry(row)
	if err != nil {
		return RegistryEntry{}, fmt.Errorf("registry entry %s: %w", name, err)
	}
	return r, nil
}

// DeleteRegistryEntry removes an entry if it belongs to the given owner, and
// reports whether it did.
func (e *Engine) DeleteRegistryEntry(ctx context.Context, name, ownerNamespace, ownerName string) (bool, error) {
	deleted, err := e.q.RegistryDelete(ctx, queries.RegistryDeleteParams{
		WorkflowName: name, OwnerNamespace: nullIfEmpty(ownerNamespace), OwnerName: nullIfEmpty(ownerName),
	})
	if err != nil {
		return false, translate("unregister workflow "+name, err)
	}
	return deref(deleted), nil
}
