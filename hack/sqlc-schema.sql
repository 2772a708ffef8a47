-- The schema sqlc.yaml gives sqlc: nothing on purpose. sqlc's own reading of
-- internal/engine/sql/workflow.sql knows neither its domains nor its
-- functions' result columns; with no catalog, every parameter and column of
-- internal/engine/queries/*.sql is typed by the database itself, which
-- hack/gen-queries.sh installs from the schema file.
create schema workflow;
