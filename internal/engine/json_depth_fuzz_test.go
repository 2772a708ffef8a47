package engine_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// containerDepth is how many objects and arrays nest on the deepest path of
// a JSON text (0 for a scalar), counted outside strings.
func containerDepth(text string) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range []byte(text) {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// randomJSON builds a JSON value of random shape whose deepest path is
// about depth containers, with strings that hold brackets and quotes.
func randomJSON(r *rand.Rand, depth int) string {
	if depth == 0 {
		switch r.IntN(4) {
		case 0:
			return `"a[{\"}]"`
		case 1:
			return "12.5e3"
		case 2:
			return "null"
		default:
			return `"x"`
		}
	}
	n := 1 + r.IntN(3)
	parts := make([]string, n)
	deep := r.IntN(n)
	for i := range parts {
		d := depth - 1
		if i != deep {
			d = r.IntN(min(depth, 3))
		}
		parts[i] = randomJSON(r, d)
	}
	if r.IntN(2) == 0 {
		return "[" + strings.Join(parts, ",") + "]"
	}
	for i := range parts {
		parts[i] = `"k` + string(rune('a'+i)) + `":` + parts[i]
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// FuzzJSONTooDeep checks workflow.json_too_deep, the database's bound on
// nesting, against a plain count: a value is refused exactly when more than
// engine.MaxJSONDepth objects and arrays nest on one path. `go test` runs the
// seeds and a few hundred random shapes; `go test -fuzz FuzzJSONTooDeep`
// explores further.
func FuzzJSONTooDeep(f *testing.F) {
	pool, _ := pgtest.NewPool(f)
	ctx := context.Background()
	check := func(t *testing.T, text string) {
		if !json.Valid([]byte(text)) || containerDepth(text) > 5000 {
			return
		}
		var tooDeep bool
		if err := pool.QueryRow(ctx, "select workflow.json_too_deep($1::jsonb)", text).Scan(&tooDeep); err != nil {
			return // a value Postgres does not take (NUL escapes, numbers it refuses) is refused on input
		}
		if want := containerDepth(text) > engine.MaxJSONDepth; tooDeep != want {
			t.Fatalf("json_too_deep(%.200s…) = %v, depth %d", text, tooDeep, containerDepth(text))
		}
	}
	r := rand.New(rand.NewPCG(26, 1))
	for _, d := range []int{0, 1, 2, 63, 64, 65, 66, 100, 1000} {
		f.Add(strings.Repeat("[", d) + strings.Repeat("]", d))
		f.Add(strings.Repeat(`{"a":`, d) + "1" + strings.Repeat("}", d))
		f.Add(strings.Repeat("[", d) + `"]]]]"` + strings.Repeat("]", d))
		f.Add(randomJSON(r, d))
		f.Add(randomJSON(r, d))
	}
	for range 200 {
		f.Add(randomJSON(r, 55+r.IntN(20)))
	}
	f.Fuzz(check)
}
