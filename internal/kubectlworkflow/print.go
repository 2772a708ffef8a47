package kubectlworkflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// The output formats of -o.
const (
	outputHuman = ""
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
	outputName  = "name"
)

// checkOutput refuses an -o format that is not one of allowed, with
// kubectl's message.
func checkOutput(format string, allowed ...string) error {
	if format == outputHuman || slices.Contains(allowed, format) {
		return nil
	}
	sorted := slices.Sorted(slices.Values(allowed))
	return usagef("unable to match a printer suitable for the output format %q, allowed formats are: %s",
		format, strings.Join(sorted, ","))
}

// printObject writes obj as JSON (indented by four spaces, as kubectl
// does) or YAML.
func printObject(w io.Writer, format string, obj any) error {
	var out []byte
	var err error
	switch format {
	case outputJSON:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "    ")
		enc.SetEscapeHTML(false)
		err = enc.Encode(obj)
		out = buf.Bytes()
	case outputYAML:
		out, err = yaml.Marshal(obj)
	default:
		return fmt.Errorf("print as %q: not a structured output format", format)
	}
	if err != nil {
		return fmt.Errorf("encode as %s: %w", format, err)
	}
	if _, err := w.Write(out); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// printList writes items as kubectl writes a list for -o json|yaml: a v1
// List holding them.
func printList(w io.Writer, format string, items []map[string]any) error {
	if items == nil {
		items = []map[string]any{}
	}
	return printObject(w, format, map[string]any{
		"apiVersion": "v1",
		"kind":       "List",
		"items":      items,
		"metadata":   map[string]any{"resourceVersion": ""},
	})
}

// qualifiedName is a run's name as -o name prints it.
func qualifiedName(name string) string { return resourceName + "/" + name }

// newTable returns a writer that aligns tab-separated columns as kubectl's
// tables are (three spaces between columns). Flush it when done.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 8, 3, ' ', 0) }

// age is how long ago t was, as kubectl's AGE column says it.
func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// orNone is s, or "<none>" when s is empty, as kubectl's wide columns show
// an unset value.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// clip shortens s to at most n runes, marking the cut with an ellipsis, and
// makes it one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
