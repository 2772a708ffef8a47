package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// maxBulk is the most runs one bulk action reaches: a filter matching more
// is refused (narrow it, or act in several steps).
const maxBulk = 1000

// bulkStatuses are the statuses a bulk action's filter must name: the runs
// it can act on (none for an action that is not one).
func bulkStatuses(action string) []string {
	switch action {
	case "cancel":
		return []string{string(engine.StatusPending), string(engine.StatusLeased)}
	case "retry":
		return []string{string(engine.StatusFailed), string(engine.StatusCancelled)}
	}
	return nil
}

// bulkView is what the bulk action's pages show.
type bulkView struct {
	Action string
	Filter runFilter
	// Fields are the filter as the confirming form posts it.
	Fields url.Values
	// Targets is how many runs the action would reach; Refused how many
	// more match in namespaces the viewer may not act on; Mirrored how
	// many are WorkflowRuns' (retried on the object, which keeps count).
	Targets, Refused, Mirrored int
	// Over says more than maxBulk runs match.
	Over bool
	Max  int
	// Changed says the count differs from the one confirmed.
	Changed bool
	CSRF    string
	// Done, Skipped and Failed count the runs of an action made: acted
	// on, left as they were (finished or retried meanwhile), not written.
	Done, Skipped, Failed int
	Made                  bool
	Error                 string
	Back                  string
}

// bulkTargets lists the runs a bulk action with filter f would reach: of
// f's status, readable by the viewer, in namespaces where the viewer may
// act (those in others counted apart), at most maxBulk+1 in all.
func (s *Server) bulkTargets(ctx context.Context, a access, action string, f runFilter) (b bulkTargets, problems []inboxProblem, err error) {
	f.AfterAt, f.AfterID = time.Time{}, ""
	all, problems, err := s.mergedRuns(ctx, f, a, maxBulk+1)
	if err != nil {
		return b, problems, err
	}
	if len(all) > maxBulk {
		// Deleted runs and those of other namespaces count too: the
		// bound is on what the filter reaches.
		b.over = true
		all = all[:maxBulk+1]
	}
	allowed := map[string]bool{}
	for _, r := range all {
		if r.Deleted || r.Status != f.Status {
			continue
		}
		if action == "retry" && r.Name != "" {
			b.mirrored++
			continue
		}
		ok, seen := allowed[r.Namespace]
		if !seen {
			if ok, err = s.mayAct(ctx, a, r.Namespace); err != nil {
				return b, problems, err
			}
			allowed[r.Namespace] = ok
		}
		if ok {
			b.runs = append(b.runs, r)
		} else {
			b.refused++
		}
	}
	return b, problems, nil
}

// bulkTargets is what a bulk action would reach.
type bulkTargets struct {
	runs []runRow
	// refused counts the runs of namespaces the viewer may not act on,
	// mirrored the WorkflowRuns' runs a retry leaves to their objects.
	refused, mirrored int
	// over says the filter reaches more than maxBulk runs.
	over bool
}

// parseBulk reads a bulk action and its filter from a query or a form.
func parseBulk(q url.Values) (string, runFilter, error) {
	action := q.Get("action")
	statuses := bulkStatuses(action)
	if statuses == nil {
		return "", runFilter{}, errors.New("action must be cancel or retry")
	}
	f, err := parseRunFilter(url.Values{"prefix": q["prefix"], "status": q["status"], "namespace": q["namespace"],
		"from": q["from"], "to": q["to"]})
	if err != nil {
		return action, f, err
	}
	if !slices.Contains(statuses, f.Status) {
		return action, f, fmt.Errorf("to %s runs in bulk, filter them by status %s", action, strings.Join(statuses, " or "))
	}
	return action, f, nil
}

// serveBulk shows what a bulk action would do and asks to confirm it
// (GET), or makes it once confirmed with the count shown (POST).
func (s *Server) serveBulk(w http.ResponseWriter, r *http.Request) {
	a := accessOf(r.Context())
	posted := r.Method == http.MethodPost
	if posted {
		if err := s.checkForm(w, r); err != nil {
			s.fail(w, r, http.StatusForbidden, err.Error(), nil)
			return
		}
	} else if s.gate == nil || s.actor == nil {
		s.fail(w, r, http.StatusForbidden, "Actions need the console's Kubernetes authentication (--console-auth=kubernetes).", nil)
		return
	}
	values := r.URL.Query()
	if posted {
		values = r.PostForm
	}
	action, f, err := parseBulk(values)
	v := bulkView{Action: action, Filter: f, Max: maxBulk, CSRF: a.csrf}
	if err != nil {
		v.Error = err.Error()
		s.render(w, r, "bulk", http.StatusBadRequest, page{Title: "Runs in bulk", Nav: "runs", Data: v})
		return
	}
	v.Fields = f.query()
	v.Back = "/runs?" + v.Fields.Encode()
	ctx, cancel := s.inboxes.bounded(r.Context())
	defer cancel()
	targets, problems, err := s.bulkTargets(ctx, a, action, f)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "The runs could not be read, or the Kubernetes API server could not say what you may do; nothing was done.", err)
		return
	}
	v.Targets, v.Refused, v.Mirrored, v.Over = len(targets.runs), targets.refused, targets.mirrored, targets.over
	status := http.StatusOK
	if posted {
		expect, convErr := strconv.Atoi(r.PostForm.Get("expect"))
		switch {
		case v.Over:
			status = http.StatusConflict
		case convErr != nil || expect != len(targets.runs):
			v.Changed, status = true, http.StatusConflict
		case len(problems) > 0:
			s.fail(w, r, http.StatusServiceUnavailable, "An inbox could not be read now; nothing was done. Try again shortly.", nil)
			return
		default:
			// The writes go on should the viewer leave: a bulk action is
			// not cut in the middle by a closed tab.
			wctx, cancelWrites := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
			defer cancelWrites()
			s.bulkAct(wctx, a, action, targets.runs, &v)
			v.Made = true
		}
	}
	s.render(w, r, "bulk", status, page{Title: "Runs in bulk", Nav: "runs", Data: v, Unread: unread(problems)})
}

// bulkAct makes action on each target, counting what happened.
func (s *Server) bulkAct(ctx context.Context, a access, action string, targets []runRow, v *bulkView) {
	engines := map[string]*engine.Engine{}
	for _, t := range targets {
		eng, ok := engines[t.Inbox]
		if !ok {
			var err error
			if eng, err = s.actor.Engine(ctx, t.Inbox); err != nil {
				s.log.Warn("Console cannot write to an inbox for a bulk action", "inbox", t.Inbox, "error", err)
			}
			engines[t.Inbox] = eng
		}
		if eng == nil {
			v.Failed++
			continue
		}
		switch action {
		case "cancel":
			done, err := eng.CancelRunAs(ctx, t.ID, by(a))
			switch {
			case err != nil:
				v.Failed++
				s.log.Warn("Console bulk cancel of a run failed", "run", t.ID, "error", err)
			case done:
				v.Done++
			default:
				v.Skipped++
			}
		case "retry":
			err := eng.RetryRun(ctx, engine.RetryParams{ID: t.ID, By: by(a)})
			switch {
			case err == nil:
				v.Done++
			case errors.Is(err, engine.ErrInvalid), errors.Is(err, engine.ErrNotFound):
				v.Skipped++
			default:
				v.Failed++
				s.log.Warn("Console bulk retry of a run failed", "run", t.ID, "error", err)
			}
		}
	}
	s.log.Info("Console bulk action", "action", action, "user", a.who.Name, "done", v.Done, "skipped", v.Skipped,
		"failed", v.Failed)
}
