package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	var name *string // null: another object owns the name
	err := e.pool.QueryRow(ctx, e.q[qRegistryUpsert], pgx.NamedArgs{
		"workflow_name": r.WorkflowName, "runtime": nullIfEmpty(r.Runtime), "is_enabled": r.Enabled,
		"description": r.Description, "owner_namespace": nullIfEmpty(r.OwnerNamespace),
		"owner_name": nullIfEmpty(r.OwnerName), "definition": def,
		"max_leased": r.Flow.MaxLeased, "max_leased_per_key": r.Flow.MaxLeasedPerKey,
		"rate_limit": r.Flow.RateLimit, "rate_period_ms": ratePeriodMs(r.Flow), "rate_per_key": r.Flow.RatePerKey,
		"shared_with": r.SharedWith,
	}).Scan(&name)
	if err == nil && name == nil {
		return fmt.Errorf("register workflow %s: %w", r.WorkflowName, ErrOwnedElsewhere)
	}
	return translate("register workflow "+r.WorkflowName, err)
}

func scanRegistryEntry(row pgx.Row) (RegistryEntry, error) {
	var r RegistryEntry
	var ns, owner, runtime *string
	var def []byte
	var periodMs *int64
	var namespace string
	err := row.Scan(&r.WorkflowName, &runtime, &r.Enabled, &r.Description, &ns, &owner, &r.CreatedAt, &r.UpdatedAt, &def,
		&r.Flow.MaxLeased, &r.Flow.MaxLeasedPerKey, &r.Flow.RateLimit, &periodMs, &r.Flow.RatePerKey, &namespace,
		&r.SharedWith)
	if len(r.SharedWith) == 0 {
		r.SharedWith = nil
	}
	r.OwnerNamespace, r.OwnerName, r.Runtime = deref(ns), deref(owner), deref(runtime)
	if periodMs != nil {
		r.Flow.RatePeriod = time.Duration(*periodMs) * time.Millisecond
	}
	if err == nil && def != nil {
		r.Definition = new(DAGDefinition)
		if err := json.Unmarshal(def, r.Definition); err != nil {
			return r, fmt.Errorf("decode definition of %s: %w", r.WorkflowName, err)
		}
	}
	return r, err
}

// ListRegistryEntriesByOwner returns the entries declared by one owner.
func (e *Engine) ListRegistryEntriesByOwner(ctx context.Context, ownerNamespace, ownerName string) ([]RegistryEntry, error) {
	rows, err := e.pool.Query(ctx, e.q[qRegistryListByOwner], pgx.NamedArgs{
		"owner_namespace": ownerNamespace, "owner_name": ownerName,
	})
	if err != nil {
		return nil, translate("list registry entries", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RegistryEntry, error) { return scanRegistryEntry(row) })
	if err != nil {
		return nil, translate("list registry entries", err)
	}
	return out, nil
}

// GetRegistryEntry returns namespace's entry for a workflow type ("" means
// "default"), or an error wrapping ErrNotFound.
func (e *Engine) GetRegistryEntry(ctx context.Context, namespace, name string) (RegistryEntry, error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	r, err := scanRegistryEntry(e.pool.QueryRow(ctx, e.q[qRegistryGet], pgx.NamedArgs{
		"workflow_name": name, "namespace": namespace,
	}))
	if errors.Is(err, pgx.ErrNoRows) {
		return RegistryEntry{}, fmt.Errorf("registry entry %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return RegistryEntry{}, translate("registry entry "+name, err)
	}
	return r, nil
}

// DeleteRegistryEntry removes an entry if it belongs to the given owner, and
// reports whether it did.
func (e *Engine) DeleteRegistryEntry(ctx context.Context, name, ownerNamespace, ownerName string) (bool, error) {
	var deleted bool
	err := e.pool.QueryRow(ctx, e.q[qRegistryDelete], pgx.NamedArgs{
		"workflow_name": name, "owner_namespace": nullIfEmpty(ownerNamespace), "owner_name": nullIfEmpty(ownerName),
	}).Scan(&deleted)
	if err != nil {
		return false, translate("unregister workflow "+name, err)
	}
	return deleted, nil
}
