// Package simpleworkflow is the Go SDK of the simple-workflow durable inbox.
//
// Producers use a Client to record intents (runs), look them up and cancel
// them. Once Create returns, the run is committed to Postgres and will run
// eventually, whether or not any worker is up.
//
// Workers use a Poller: it claims runs whose type starts with one of its type
// prefixes, calls the handler registered for the run's type with a context
// that is cancelled when the run is cancelled or its lease is lost,
// heartbeats automatically, records the result or the error (failed attempts
// are retried with exponential backoff and jitter), and on shutdown hands
// unfinished runs back instead of leaving them to lease expiry.
//
// Every transition is a call to one of the inbox's SQL functions, so a Go
// worker, a Python worker and a plain SQL producer see identical semantics
// and leave identical audit trails.
package simpleworkflow
