package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

var loginNext = regexp.MustCompile(`name="next" value="([^"]*)"`)

// The login form sends a browser back to a page of the console only. A next
// that names another site, or that a browser would read as naming one once
// it drops tabs and newlines and reads backslashes as slashes, is replaced
// by the overview, on the form and after the login; the console's own pages,
// with their filters, are kept.
func TestLoginSendsBackToTheConsoleOnly(t *testing.T) {
	t.Parallel()
	a := setupAuth(t, time.Minute)
	a.namespace(t, "team-login")
	token := a.serviceAccount(t, "team-login", "viewer")

	// Each next is written as it would be in a link's query.
	hostile := []string{
		"%2F%09%2Fevil.example", // "/\t/evil.example": browsers drop the tab
		"%2F%0A%2Fevil.example",
		"%2F%0D%2Fevil.example",
		"%2F%0D%0A%2Fevil.example",
		"%09%2F%2Fevil.example",
		"%2F%2F%09evil.example",
		"%2F%7F%2Fevil.example",
		"%2F%00%2Fevil.example",
		"%00",
		"%2F%00",
		"%2F%2500%2Fevil.example", // "/%00/evil.example": a NUL encoded once more
		"%2F%2Fevil.example",
		"//evil.example",
		"%2F%252F%252Fevil.example", // "/%2F%2Fevil.example"
		`/\evil.example`,
		"/%5Cevil.example",
		"%2F%255Cevil.example", // "/%5Cevil.example"
		"%2Fruns%5C..%5C%5Cevil.example",
		"https://evil.example",
		"https:%2F%2Fevil.example",
		"HTTPS://evil.example/runs",
		"javascript:alert(1)",
		"evil.example",
		"%20%2F%2Fevil.example",
		"%2F%2F%2Fevil.example",
		"%2Flogin",
	}
	legit := []string{
		"/",
		"/runs",
		"/runs?namespace=a&status=failed",
		"/runs?namespace=team-login&status=failed&prefix=teama.&limit=50",
		"/runs/0190a2c4-7d2e-7b3a-9a1f-3c2d1e0f4a5b",
		"/schedules/team-login/nightly?x=%2F%2Fnot-a-host",
	}
	check := func(raw, want string) {
		t.Helper()
		// The form carries next on.
		code, body := a.as(t, "", "/login?next="+raw)
		m := loginNext.FindStringSubmatch(body)
		if code != http.StatusOK || m == nil {
			t.Fatalf("login form with next=%s: %d, next field %v", raw, code, m)
		}
		if got := html.UnescapeString(m[1]); got != want {
			t.Errorf("login form with next=%s carries %q, want %q", raw, got, want)
		}
		// The login sends the browser there.
		next, err := url.QueryUnescape(raw)
		if err != nil {
			t.Fatal(err)
		}
		form := url.Values{"token": {token}, "next": {next}}
		req, err := http.NewRequestWithContext(a.ctx, http.MethodPost, a.base+"/login", strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", a.base)
		// The transport, not a client: a client refuses to read a Location
		// with control characters, which is what a browser would follow.
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil { // a Location Go cannot read either, such as one with DEL
			t.Errorf("login with next %q: %v", next, err)
			return
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
			t.Errorf("login with next %q: %d to %q, want 303 to %q", next, resp.StatusCode, resp.Header.Get("Location"), want)
		}
	}
	for _, raw := range hostile {
		check(raw, "/")
	}
	for _, next := range legit {
		check(url.QueryEscape(next), next)
	}
}
