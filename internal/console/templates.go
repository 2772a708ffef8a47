package console

import (
	"fmt"
	"html/template"
	"time"
)

// parsePages parses the templates that are pages, each with the layout.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"ago":      ago,
		"when":     when,
		"chart":    newChart,
		"shortID":  func(id string) string { return id[:min(8, len(id))] },
		"add":      func(a, b int) int { return a + b },
		"since":    func(t *time.Time, now time.Time) string { return sinceOrDash(t, now) },
		"duration": func(a time.Time, b *time.Time) string { return between(a, b) },
	}
	out := map[string]*template.Template{}
	for _, name := range []string{"overview", "runs", "run", "schedules", "schedule", "error", "login", "bulk"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// when formats a time for the pages (UTC, to the second).
func when(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return "—"
		}
		return v.UTC().Format("2006-01-02 15:04:05Z")
	case *time.Time:
		if v == nil {
			return "—"
		}
		return v.UTC().Format("2006-01-02 15:04:05Z")
	}
	return "—"
}

// ago says how long before now t was, roughly.
func ago(t time.Time, now time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		return "in " + roughly(-d)
	}
	return roughly(d) + " ago"
}

func sinceOrDash(t *time.Time, now time.Time) string {
	if t == nil {
		return "—"
	}
	return roughly(now.Sub(*t))
}

func between(a time.Time, b *time.Time) string {
	if b == nil {
		return "—"
	}
	return roughly(b.Sub(a))
}

func roughly(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// chart is the drawing of a type's last hour: a column per five minutes,
// succeeded runs stacked under failed ones.
type chart struct {
	Bars          []bar
	Width, Height int
	Max           int64
}

type bar struct {
	X, OkY, OkH, BadY, BadH int
	Label                   string
}

func newChart(r typeRow) chart {
	const colW, height = 8, 28
	c := chart{Width: buckets * colW, Height: height}
	for i := range buckets {
		c.Max = max(c.Max, r.Succeeded[i]+r.Failed[i])
	}
	for i := range buckets {
		b := bar{X: i * colW}
		if c.Max > 0 {
			b.OkH = int(r.Succeeded[i] * height / c.Max)
			b.BadH = int(r.Failed[i] * height / c.Max)
			if r.Failed[i] > 0 && b.BadH == 0 {
				b.BadH = 1
			}
		}
		if b.OkH+b.BadH > height {
			b.OkH = height - b.BadH
		}
		b.OkY = height - b.OkH
		b.BadY = b.OkY - b.BadH
		b.Label = fmt.Sprintf("%d–%d min ago: %d succeeded, %d failed or cancelled", (buckets-i)*5, (buckets-1-i)*5, r.Succeeded[i], r.Failed[i])
		c.Bars = append(c.Bars, b)
	}
	return c
}
