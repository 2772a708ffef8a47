package engine

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// errorTable is testdata/contract/errors.json, the one table of the
// inbox's SQLSTATEs both SDKs map from.
type errorTable struct {
	Codes []struct {
		Code string  `json:"code"`
		Go   *string `json:"go"`
	} `json:"codes"`
}

func readErrorTable(t *testing.T) errorTable {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "contract", "errors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table errorTable
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	return table
}

// Every SQLSTATE the schema file raises is a code of the table, every code
// of the table is raised somewhere, and the Go mapping (generated from the
// table) gives each the error the table names.
func TestEveryCodeTheSchemaRaisesIsInTheTable(t *testing.T) {
	table := readErrorTable(t)
	sentinels := map[string]error{"ErrInvalid": ErrInvalid, "ErrForbidden": ErrForbidden, "ErrNotFound": ErrNotFound,
		"ErrRunFinished": ErrRunFinished}
	listed := map[string]bool{}
	for _, c := range table.Codes {
		listed[c.Code] = true
		got, ok := codeError(c.Code)
		var want error
		if c.Go != nil {
			if want = sentinels[*c.Go]; want == nil {
				t.Errorf("%s: the table names %s, which is no error of the package", c.Code, *c.Go)
			}
		}
		if !ok || got != want {
			t.Errorf("%s: codeError gives %v (%v), the table %v", c.Code, got, ok, want)
		}
	}
	raised := map[string]bool{}
	for _, m := range regexp.MustCompile(`errcode = '([^']+)'`).FindAllStringSubmatch(schemaSQL, -1) {
		raised[m[1]] = true
		if !listed[m[1]] {
			t.Errorf("the schema raises SQLSTATE %s, which testdata/contract/errors.json does not list", m[1])
		}
	}
	for code := range listed {
		if !raised[code] {
			t.Errorf("the table lists %s, which the schema never raises", code)
		}
	}
	if _, ok := codeError("23514"); ok {
		t.Error("codeError claims a standard SQLSTATE")
	}
}

// translate says the database's sentence after the operation and the
// kind, and the error unwraps to both the typed error and the server's.
func TestTranslateSaysTheDatabasesSentence(t *testing.T) {
	pg := &pgconn.PgError{Code: "SW001", Message: "priority must be between 0 and 1000000",
		ConstraintName: "workflow_run_priority_range"}
	err := translate("create run", pg)
	if err.Error() != "create run: invalid input: priority must be between 0 and 1000000" {
		t.Errorf("message %q", err)
	}
	var back *pgconn.PgError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &back) || back.ConstraintName != "workflow_run_priority_range" {
		t.Errorf("%v does not unwrap to ErrInvalid and the server's error", err)
	}
	for code, want := range map[string]error{"SW002": ErrForbidden, "SW003": ErrNotFound, "SW004": ErrRunFinished,
		"SW005": ErrInvalid, "SW006": ErrInvalid} {
		if err := translate("op", &pgconn.PgError{Code: code, Message: "m"}); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", code, err, want)
		}
	}
	untyped := translate("op", &pgconn.PgError{Code: "SW007", Message: "m"})
	for _, typed := range []error{ErrInvalid, ErrForbidden, ErrNotFound, ErrRunFinished} {
		if errors.Is(untyped, typed) {
			t.Errorf("SW007 wraps %v", typed)
		}
	}
}
