// Package console is the read-only web console of simple-workflow: an
// overview of every worker pool's and type's queue, a filtered list of runs
// and a page per run (payload, result, attempts, audit trail, step journal,
// signals, children, a DAG's graph), the cron schedules with their next
// ticks and latest runs, updated live by server-sent events that follow the
// inbox's notifications.
//
// It reads through its own connection pool, read-only and (by default) as
// the database role workflow_reader, and escapes everything it shows: the
// payloads, results and errors it displays are user data. Its pages and
// assets are embedded in the binary; there is no JavaScript build step.
package console
