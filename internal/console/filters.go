package console

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// pageSize is how many runs a page of the list shows.
const pageSize = 50

// statusNames lists the statuses a list can be filtered by, in the order
// the filter form offers them.
func statusNames() []string {
	return []string{"pending", "leased", "succeeded", "failed", "cancelled"}
}

// validStatus reports whether s is a status a list can be filtered by.
func validStatus(s string) bool { return slices.Contains(statusNames(), s) }

var (
	prefixForm    = regexp.MustCompile(`^[a-z0-9_.]*$`)
	namespaceForm = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

// runFilter is what the runs page lists: each field empty or zero when unset.
type runFilter struct {
	Prefix    string
	Status    string
	Namespace string
	From, To  time.Time
	// After continues below the run at (AfterAt, AfterID), newest first.
	AfterAt time.Time
	AfterID string
}

// parseTime reads a time filter: what an HTML datetime-local input sends
// (taken as UTC), or RFC 3339.
func parseTime(field, v string) (time.Time, error) {
	for _, f := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339Nano} {
		if t, err := time.Parse(f, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s must be a time such as 2026-01-02T15:04 (UTC)", field)
}

// parseRunFilter reads the runs page's query string. A value it cannot use
// is an error that names the field; nothing of it reaches SQL but as a
// parameter.
func parseRunFilter(q url.Values) (runFilter, error) {
	var f runFilter
	for k, vs := range q {
		for _, v := range vs {
			if len(v) > 512 || !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
				return f, fmt.Errorf("%s is not a usable value", k)
			}
		}
	}
	f.Prefix = strings.TrimSpace(q.Get("prefix"))
	if len(f.Prefix) > 253 || !prefixForm.MatchString(f.Prefix) {
		return f, errors.New("type prefix may hold only a-z, 0-9, '_' and '.' (at most 253 characters)")
	}
	f.Status = q.Get("status")
	if f.Status != "" && !validStatus(f.Status) {
		return f, fmt.Errorf("status must be one of %s", strings.Join(statusNames(), ", "))
	}
	f.Namespace = strings.TrimSpace(q.Get("namespace"))
	if f.Namespace != "" && (len(f.Namespace) > 63 || !namespaceForm.MatchString(f.Namespace)) {
		return f, errors.New("namespace must be a Kubernetes namespace name")
	}
	var err error
	if v := q.Get("from"); v != "" {
		if f.From, err = parseTime("from", v); err != nil {
			return f, err
		}
	}
	if v := q.Get("to"); v != "" {
		if f.To, err = parseTime("to", v); err != nil {
			return f, err
		}
	}
	if v := q.Get("after"); v != "" {
		if f.AfterAt, f.AfterID, err = engine.DecodeCursor(v); err != nil {
			return f, errors.New("after is not a cursor this console made")
		}
	}
	return f, nil
}

// query returns the filter as a query string, without the cursor.
func (f runFilter) query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("prefix", f.Prefix)
	set("status", f.Status)
	set("namespace", f.Namespace)
	if !f.From.IsZero() {
		q.Set("from", f.From.Format(time.RFC3339))
	}
	if !f.To.IsZero() {
		q.Set("to", f.To.Format(time.RFC3339))
	}
	return q
}
