package engine

import (
	"context"
	"fmt"
	"regexp"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
)

// DefaultNamespace is the namespace of runs, registry entries and workers
// that name none: the schema owner's runs, and every run of an install
// that uses one namespace.
const DefaultNamespace = "default"

// Capacities a database role may be bound to a namespace in
// (GrantNamespace).
const (
	// AsProducer records, cancels, signals, retries and reads runs.
	AsProducer = "producer"
	// AsWorker claims and executes runs of the namespace's types.
	AsWorker = "worker"
	// AsReader reads runs.
	AsReader = "reader"
)

var namespaceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ValidateNamespace checks that ns is a namespace name: a Kubernetes
// namespace (a DNS label, at most 63 characters). Empty is valid and means
// the caller's default.
func ValidateNamespace(ns string) error {
	if ns == "" {
		return nil
	}
	if len(ns) > 63 || !namespaceName.MatchString(ns) {
		return fmt.Errorf("%w: namespace %.100q: a namespace is a DNS label of at most 63 characters (lowercase letters, digits and '-')", ErrInvalid, ns)
	}
	return nil
}

// GrantNamespace binds a database role to a namespace as AsProducer,
// AsWorker or AsReader (workflow.grant_namespace): the role's logins act on
// that namespace's runs in that capacity. Only the schema's owner may.
func (e *Engine) GrantNamespace(ctx context.Context, role, namespace, as string) error {
	err := e.q.NamespaceGrant(ctx, queries.NamespaceGrantParams{Role: role, Namespace: namespace, GrantAs: as})
	if err != nil {
		return translate(fmt.Sprintf("bind role %s to namespace %s as %s", role, namespace, as), err)
	}
	return nil
}

// RevokeNamespace undoes GrantNamespace and reports whether there was such
// a binding (workflow.revoke_namespace).
func (e *Engine) RevokeNamespace(ctx context.Context, role, namespace, as string) (bool, error) {
	done, err := e.q.NamespaceRevoke(ctx, queries.NamespaceRevokeParams{Role: role, Namespace: namespace, GrantAs: as})
	if err != nil {
		return false, translate(fmt.Sprintf("unbind role %s from namespace %s as %s", role, namespace, as), err)
	}
	return deref(done), nil
}
