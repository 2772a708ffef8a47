package engine_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	// sqlComment and sqlString are cut from a statement before it is read:
	// a name in a comment or in a quoted setting is not a read.
	sqlComment = regexp.MustCompile(`--[^\n]*`)
	sqlString  = regexp.MustCompile(`'(?:[^']|'')*'`)
	// sqlVerb marks a string as a statement.
	sqlVerb = regexp.MustCompile(`(?i)\b(select|insert|update|delete|with)\b`)
	// sqlWrite is a write to a table, which only the functions may do.
	sqlWrite = regexp.MustCompile(`(?i)\b(insert\s+into|update\s+workflow\.|delete\s+from|truncate)\b`)
	// workflowName is a name in schema workflow; a call has "(" after it.
	workflowName = regexp.MustCompile(`workflow\.([a-z_][a-z0-9_]*)(\s*\()?`)
)

// clientSQLSources are the Go packages and statement files whose SQL reaches
// the database from a client: the engine the SDK and the manager use, the
// Go SDK, the console and the controllers. migrate.go installs the schema
// and is the one file allowed its DDL and its bookkeeping reads.
var clientSQLSources = []string{".", "queries", "queries/nullable_arrays", "../console", "../controller", "../../pkg/simpleworkflow"}

// The clients call the schema's functions only: every workflow.<name> in
// the SQL they send is a call, and none of it writes a table. The rules
// live in the functions, so a client cannot drift from them (the Python
// SDK has the same guard, test_the_sdk_holds_no_query_on_a_table).
func TestClientsCallTheSchemaFunctionsOnly(t *testing.T) {
	var found []string
	statements := 0
	check := func(where, text string) {
		text = sqlString.ReplaceAllString(sqlComment.ReplaceAllString(text, ""), "''")
		if !strings.Contains(text, "workflow.") || !sqlVerb.MatchString(text) {
			return
		}
		statements++
		if m := sqlWrite.FindString(text); m != "" {
			found = append(found, where+": writes a table ("+m+")")
		}
		for _, m := range workflowName.FindAllStringSubmatch(text, -1) {
			if m[2] == "" {
				found = append(found, where+": reads workflow."+m[1]+" as a table")
			}
		}
	}
	for _, dir := range clientSQLSources {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("read %s: %v", dir, err)
		}
		for _, e := range entries {
			name := e.Name()
			path := filepath.Join(dir, name)
			switch {
			case strings.HasSuffix(name, ".sql"):
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				check(path, string(b))
			case strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") && path != "migrate.go":
				f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
				if err != nil {
					t.Fatalf("parse %s: %v", path, err)
				}
				ast.Inspect(f, func(n ast.Node) bool {
					lit, ok := n.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						return true
					}
					if s, err := strconv.Unquote(lit.Value); err == nil {
						check(path, s)
					}
					return true
				})
			}
		}
	}
	if len(found) > 0 {
		t.Errorf("client SQL that does more than call the schema's functions:\n%s", strings.Join(found, "\n"))
	}
	if statements < 30 {
		t.Errorf("the scan found %d statements; it should see every client's SQL", statements)
	}
}
