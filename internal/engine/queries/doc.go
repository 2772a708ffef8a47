// Package queries holds the engine's queries: each file X.sql beside its
// X.sql.gen.go, the typed methods sqlc writes from it (sqlc.yaml; run
// make generate after a change). Only package engine uses it.
package queries
