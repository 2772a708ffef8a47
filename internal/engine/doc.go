// Package engine is the durable inbox: the Postgres schema and its migrations,
// and thin Go callers of the SQL functions that implement every transition of
// a workflow run (claim, heartbeat, complete, fail, release, cancel, reap).
//
// The state machine lives in the database so that every runtime that can call
// SQL gets identical semantics and audit events. This package never imports
// Kubernetes.
package engine
