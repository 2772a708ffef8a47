package simpleworkflow_test

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// Every verb of the Go SDK has its Python name in testdata/contract/parity.json
// (or is listed there as Go's alone, with the reason); the Python tests check
// the other side. A verb added to one SDK only fails one of the two.
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
	var missing []string
	exists := map[string]bool{}
	for name, typ := range types {
		for i := range typ.NumMethod() {
			verb := name + "." + typ.Method(i).Name
			exists[verb] = true
			if !listed[verb] {
				missing = append(missing, verb)
			}
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
