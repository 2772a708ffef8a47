package simpleworkflow_test

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// Every verb of the Go SDK has its Python name in testdata/contract/parity.json
// (or is listed there as Go's alone, with the reason); the Python tests check
// the other side. A verb added to one SDK only fails one of the two. The verbs
// are the methods of Client, Poller and Task ("Client.Create") and the
// package's exported functions ("Connect", "Step"), read from its source.
func TestParityListsEveryGoVerb(t *testing.T) {
	t.Parallel()
	var parity struct {
		Verbs []struct {
			Go     string `json:"go"`
			Python string `json:"python"`
		} `json:"verbs"`
		Only []struct {
			Go     string `json:"go"`
			Python string `json:"python"`
			Why    string `json:"why"`
		} `json:"only"`
	}
	loadContract(t, "parity.json", &parity)
	listed := map[string]bool{}
	for _, v := range parity.Verbs {
		if v.Go == "" || v.Python == "" {
			t.Errorf("verb %+v: a shared verb names both SDKs' methods", v)
		}
		listed[v.Go] = true
	}
	for _, o := range parity.Only {
		if (o.Go == "") == (o.Python == "") || o.Why == "" {
			t.Errorf("only %+v: names one SDK's verb, and why the other has none", o)
		}
		if o.Go != "" {
			listed[o.Go] = true
		}
	}
	types := map[string]reflect.Type{
		"Client": reflect.TypeOf(&simpleworkflow.Client{}),
		"Poller": reflect.TypeOf(&simpleworkflow.Poller{}),
		"Task":   reflect.TypeOf(&simpleworkflow.Task{}),
	}
	exists := map[string]bool{}
	for name, typ := range types {
		for i := range typ.NumMethod() {
			exists[name+"."+typ.Method(i).Name] = true
		}
	}
	funcs := packageFuncs(t)
	if len(funcs) == 0 {
		t.Fatal("found no exported function in the package's source")
	}
	for _, name := range funcs {
		exists[name] = true
	}
	var missing []string
	for verb := range exists {
		if !listed[verb] {
			missing = append(missing, verb)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("Go verbs without a Python counterpart in parity.json: %s", strings.Join(missing, ", "))
	}
	for verb := range listed {
		if !exists[verb] {
			t.Errorf("parity.json names %s, which the Go SDK does not have", verb)
		}
	}
}

// packageFuncs returns the names of the exported package-level functions
// (constructors and generic helpers included) declared in the package's
// non-test source files, as the build sees them.
func packageFuncs(t *testing.T) []string {
	t.Helper()
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if pkg.Name != "simpleworkflow" {
		t.Fatalf("read package %q from the test's directory, want simpleworkflow", pkg.Name)
	}
	fset := token.NewFileSet()
	var names []string
	for _, file := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(pkg.Dir, file), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.IsExported() {
				names = append(names, fn.Name.Name)
			}
		}
	}
	return names
}
