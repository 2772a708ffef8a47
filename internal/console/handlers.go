package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// page is what every template gets: the page's own data and the layout's.
type page struct {
	Title string
	Nav   string
	// Live is the query string of the page's event stream.
	Live string
	Data any
	// User is who is logged in ("" when the console does not ask).
	User string
	// Unauthenticated says the console serves everyone (--console-auth=none).
	Unauthenticated bool
	// Unread names the inboxes the page could not read: what it shows
	// lacks their runs.
	Unread []string
	// UnreadSome says an inbox could not be read, to a viewer not shown
	// the inboxes' names.
	UnreadSome bool
	// Parts says the page's template places the note of Unread itself, in
	// its live part.
	Parts bool
}

// unreadText says which inboxes could not be read, naming them to the
// viewers of every namespace only (the inboxes are the cluster's).
func unreadText(a access, problems []inboxProblem) string {
	if !a.all {
		return "an inbox could not be read now"
	}
	return "these could not be read now: " + strings.Join(unread(problems), ", ")
}

// unread returns the names of the inboxes of problems.
func unread(problems []inboxProblem) []string {
	var out []string
	for _, p := range problems {
		out = append(out, p.Name)
	}
	return out
}

// fragmentHeader asks for the page's main part only: the console's script
// sends it when a live update arrives, and swaps the part in.
const fragmentHeader = "X-Console-Fragment"

// render writes a page, or its main part when asked for it. It renders into
// a buffer first, so a failure is an error page, not half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, name string, status int, p page) {
	t := s.pages[name]
	a := accessOf(r.Context())
	p.User, p.Unauthenticated = a.who.Name, s.gate == nil
	if !a.all && len(p.Unread) > 0 {
		// Inboxes are the cluster's: their names are for the viewers of
		// every namespace.
		p.Unread, p.UnreadSome = nil, true
	}
	var b bytes.Buffer
	tmpl := "layout"
	if r.Header.Get(fragmentHeader) != "" {
		tmpl = "fragment"
	}
	if err := t.ExecuteTemplate(&b, tmpl, p); err != nil {
		s.log.Error("Console page failed", "page", name, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fail shows an error page: the message for what the request got wrong,
// a generic one (and a log line) for the database's failures.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, msg string, err error) {
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		s.log.Error("Console request failed", "path", r.URL.Path, "error", err)
	}
	s.render(w, r, "error", status, page{Title: http.StatusText(status), Data: msg})
}

func (s *Server) serveOverview(w http.ResponseWriter, r *http.Request) {
	ov, err := s.overviewFor(r.Context(), accessOf(r.Context()))
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "The overview could not be read from the database.", err)
		return
	}
	s.render(w, r, "overview", http.StatusOK, page{Title: "Overview", Nav: "overview", Live: "?", Data: ov, Unread: ov.Unread})
}

// runsView is what the runs page shows.
type runsView struct {
	Filter   runFilter
	Statuses []string
	Runs     []runRow
	Next     string
	Error    string
	Now      time.Time
	// FromValue and ToValue fill the form's time inputs.
	FromValue, ToValue string
	// Several says the console reads more than one inbox: the list names
	// each run's.
	Several bool
	// Bulk is the query of the bulk action the filter allows ("" for
	// none): cancel for pending or leased runs, retry for failed or
	// cancelled ones.
	Bulk string
}

func (s *Server) serveRuns(w http.ResponseWriter, r *http.Request) {
	v := runsView{Statuses: statusNames(), Now: time.Now()}
	f, err := parseRunFilter(r.URL.Query())
	v.Filter = f
	if !f.From.IsZero() {
		v.FromValue = f.From.Format("2006-01-02T15:04:05")
	}
	if !f.To.IsZero() {
		v.ToValue = f.To.Format("2006-01-02T15:04:05")
	}
	if err != nil {
		v.Error = err.Error()
		s.render(w, r, "runs", http.StatusBadRequest, page{Title: "Runs", Nav: "runs", Data: v})
		return
	}
	runs, next, problems, err := s.listRuns(r.Context(), f, accessOf(r.Context()))
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "The runs could not be read from the database.", err)
		return
	}
	v.Runs, v.Several = runs, s.inboxes.several()
	if s.actor != nil && s.gate != nil {
		for _, action := range []string{"cancel", "retry"} {
			if slices.Contains(bulkStatuses(action), f.Status) {
				q := f.query()
				q.Set("action", action)
				v.Bulk = "/runs/bulk?" + q.Encode()
			}
		}
	}
	if next != "" {
		q := f.query()
		q.Set("after", next)
		v.Next = "/runs?" + q.Encode()
	}
	s.render(w, r, "runs", http.StatusOK, page{Title: "Runs", Nav: "runs", Live: "?", Data: v, Unread: unread(problems),
		Parts: true})
}

func (s *Server) serveRun(w http.ResponseWriter, r *http.Request) {
	id := strings.ToLower(r.PathValue("id"))
	if !engine.IsRunID(id) {
		s.fail(w, r, http.StatusNotFound, "A run's id is a UUID such as 0b6c5a6e-8d7e-4f43-9f51-3c1e1f0f7d3a.", nil)
		return
	}
	src, problems, err := s.findRun(r.Context(), accessOf(r.Context()), id)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "The run could not be read from the database.", err)
		return
	}
	if src == nil && len(problems) > 0 {
		// The same answer for a run that does not exist and one the viewer
		// may not read: neither is revealed.
		s.fail(w, r, http.StatusServiceUnavailable, fmt.Sprintf(
			"Run %s is not in the inboxes the console could read, and %s. Try again shortly.",
			id, unreadText(accessOf(r.Context()), problems)), nil)
		return
	}
	if src == nil {
		// The same answer as for a run that does not exist: a run the
		// viewer may not read is not revealed.
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no run %s (runs are deleted after the retention period).", id), nil)
		return
	}
	// The version first: a change while the page is read makes the stream
	// report it at once, instead of the page showing the state before it
	// with the version after it.
	readCtx, cancel := s.inboxes.bounded(r.Context())
	defer cancel()
	versions, err := src.runVersions(readCtx, []string{id})
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "The run could not be read from the database.", err)
		return
	}
	p, err := src.loadRun(readCtx, id)
	if errors.Is(err, errNoRun) {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no run %s (runs are deleted after the retention period).", id), nil)
		return
	}
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "The run could not be read from the database.", err)
		return
	}
	p.Act = s.runActions(readCtx, accessOf(r.Context()), p.Run, r.URL.Query().Get("done"))
	if p.Log, err = src.loadLog(readCtx, id, r.URL.Query().Get("log")); err != nil {
		s.fail(w, r, http.StatusInternalServerError, "The run's log could not be read from the database.", err)
		return
	}
	p.Inbox, p.Several = src.name, s.inboxes.several()
	live := "?run=" + id + "&v=" + url.QueryEscape(versions[id])
	s.render(w, r, "run", http.StatusOK, page{Title: "Run " + id, Nav: "runs", Live: live, Data: p})
}

// serveLive streams "changed" events (server-sent events) to a page: for a
// run's page when the run changes, for the others when the inbox does.
func (s *Server) serveLive(w http.ResponseWriter, r *http.Request) {
	run, version := strings.ToLower(r.URL.Query().Get("run")), r.URL.Query().Get("v")
	if run != "" && !engine.IsRunID(run) {
		http.Error(w, "run must be a run's id", http.StatusBadRequest)
		return
	}
	if len(version) > 200 {
		http.Error(w, "v is not a version this console made", http.StatusBadRequest)
		return
	}
	runInbox := ""
	if run != "" {
		src, _, err := s.findRun(r.Context(), accessOf(r.Context()), run)
		if err != nil || src == nil {
			http.Error(w, "no such run", http.StatusNotFound)
			return
		}
		runInbox = src.name
	}
	sub, why := s.hub.subscribe(viewerOf(r), run, version)
	if sub == nil {
		// 429, not 503: a browser's EventSource gives up on either, and the
		// page says the updates stopped.
		http.Error(w, why, http.StatusTooManyRequests)
		return
	}
	defer s.hub.unsubscribe(sub)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil {
		return
	}
	if rc.Flush() != nil {
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	// The stream belongs to its viewer: the token (and the run's
	// readability) is checked again while it lasts, and the stream ends
	// when they no longer hold.
	recheck := time.NewTicker(s.recheck)
	defer recheck.Stop()
	token := bearerToken(r)
	for {
		var msg string
		select {
		case <-r.Context().Done():
			return
		case <-sub.ch:
			msg = "event: changed\ndata: {}\n\n"
		case <-tick.C:
			msg = ": keep-alive\n\n"
		case <-recheck.C:
			if !s.streamStillAllowed(r.Context(), token, run, runInbox) {
				_, _ = fmt.Fprint(w, "event: unauthorized\ndata: {}\n\n")
				_ = rc.Flush()
				return
			}
			continue
		}
		if _, err := fmt.Fprint(w, msg); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}

// streamStillAllowed checks a stream's viewer again: its token still
// authenticates someone, who may still read the run it follows (if any),
// which is in inbox.
func (s *Server) streamStillAllowed(ctx context.Context, token, run, inbox string) bool {
	if s.gate == nil {
		return true
	}
	a, err := s.accessFor(ctx, token)
	if err != nil {
		if !errors.Is(err, ErrUnauthenticated) {
			s.log.Error("Console could not check a stream's token again", "error", err)
		}
		return false
	}
	if run == "" {
		return true
	}
	src, problems, err := s.findRun(ctx, a, run)
	if err == nil && src == nil {
		for _, p := range problems {
			if p.Name == inbox {
				// The run's inbox does not answer now: the stream (which
				// carries no data, only "look again") stays, and is
				// checked again later.
				return true
			}
		}
	}
	return err == nil && src != nil
}

// viewerOf names whom a request's stream counts against for the bound of
// open streams per viewer: the user its token authenticated (the same from
// any address, and apart from the other users behind the same ingress or
// proxy), else, on an unauthenticated console, its address without the port.
func viewerOf(r *http.Request) viewer {
	if user := accessOf(r.Context()).who.Name; user != "" {
		return viewer{user: user}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return viewer{address: r.RemoteAddr}
	}
	return viewer{address: host}
}
