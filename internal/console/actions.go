package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Actor writes the console's actions to an inbox, as the manager does.
type Actor interface {
	// Engine returns an engine that writes to the named inbox
	// (DefaultInbox for the default one), or an error saying why there
	// is none on this replica.
	Engine(ctx context.Context, inbox string) (*engine.Engine, error)
}

// actVerb is the verb a viewer needs on WorkflowRuns of a run's namespace
// to act on its runs from the console: what `kubectl workflow cancel`,
// `retry` and `signal` need.
const actVerb = "patch"

// maxActionBody bounds an action's form: a signal's payload (256 KiB) and
// its fields.
const maxActionBody = 300 << 10

// csrfLabel is what a viewer's form token is derived with.
const csrfLabel = "simple-workflow console action"

// csrfOf is the token the console's forms carry for the holder of a bearer
// token: derived from it, so no other site can make one (it never sees
// the token, an HttpOnly cookie), and any replica can check it.
func csrfOf(token string) string {
	if token == "" {
		return ""
	}
	key := sha256.Sum256([]byte(token))
	m := hmac.New(sha256.New, key[:])
	m.Write([]byte(csrfLabel))
	return hex.EncodeToString(m.Sum(nil))
}

// actionPath reports whether a request path is one of the console's
// actions (POST).
func actionPath(p string) bool {
	if p == "/runs/bulk" {
		return true
	}
	rest, ok := strings.CutPrefix(p, "/runs/")
	if !ok {
		return false
	}
	_, action, ok := strings.Cut(rest, "/")
	return ok && (action == "cancel" || action == "retry" || action == "signal")
}

// errActionRefused is an action the viewer may not make; its message says
// why.
type errActionRefused struct{ msg string }

func (e errActionRefused) Error() string { return e.msg }

// checkForm refuses an action that cannot be the viewer's own: without
// Kubernetes authentication (nobody is known to record), or a form not
// posted by the console's own page for this viewer.
func (s *Server) checkForm(w http.ResponseWriter, r *http.Request) error {
	if s.gate == nil || s.actor == nil {
		return errActionRefused{"Actions need the console's Kubernetes authentication (--console-auth=kubernetes): " +
			"without it, no one is known to record as having made them."}
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxActionBody)
	if err := r.ParseForm(); err != nil {
		return errActionRefused{"The form could not be read (at most 300 KiB)."}
	}
	a := accessOf(r.Context())
	if a.byHeader {
		// A script's request: no browser sends this header for another
		// site's page, unless a proxy in front adds it to every request;
		// a browser's request from another site is refused all the same.
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
			return errActionRefused{"The form was sent from another site."}
		}
		if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(r) {
			return errActionRefused{"The form was sent from another site."}
		}
		return nil
	}
	got := r.PostForm.Get("csrf")
	if !sameOrigin(r) || a.csrf == "" || !hmac.Equal([]byte(got), []byte(a.csrf)) {
		return errActionRefused{"The form was not sent by this console's page for you (or it is stale): reload the page and try again."}
	}
	return nil
}

// mayAct reports whether the viewer may act on runs of namespace ns.
func (s *Server) mayAct(ctx context.Context, a access, ns string) (bool, error) {
	if s.gate == nil || s.actor == nil || a.who.Name == "" {
		return false, nil
	}
	return s.gate.allowed(ctx, a.key, a.who, actVerb, runsResource, ns)
}

// by is how an action's event names who made it: the user the API server
// verified for the token.
func by(a access) string { return "console: " + a.who.Name }

// actionDone is the notice a run's page shows after an action (its
// ?done= value); nothing else from the query string is shown.
func actionDone(done string) string {
	switch done {
	case "cancelled":
		return "Cancelled."
	case "not-cancelled":
		return "Nothing to cancel: the run had already finished."
	case "retried":
		return "Retried: the run is pending again."
	case "signalled":
		return "Signal sent."
	case "signal-repeated":
		return "That signal was sent before (same idempotency key): nothing new was sent."
	}
	return ""
}

// serveRunAction makes one action on one run: cancel, retry or signal.
func (s *Server) serveRunAction(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	id := strings.ToLower(r.PathValue("id"))
	if !engine.IsRunID(id) {
		s.fail(w, r, http.StatusNotFound, "A run's id is a UUID such as 0b6c5a6e-8d7e-4f43-9f51-3c1e1f0f7d3a.", nil)
		return
	}
	if err := s.checkForm(w, r); err != nil {
		s.fail(w, r, http.StatusForbidden, err.Error(), nil)
		return
	}
	a := accessOf(r.Context())
	src, problems, err := s.findRun(r.Context(), a, id)
	switch {
	case err != nil:
		s.fail(w, r, http.StatusInternalServerError, "The run could not be read from the database.", err)
		return
	case src == nil && len(problems) > 0:
		s.fail(w, r, http.StatusServiceUnavailable, fmt.Sprintf("Run %s is not in the inboxes the console could read now; nothing was done.", id), nil)
		return
	case src == nil:
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no run %s; nothing was done.", id), nil)
		return
	}
	ctx, cancel := s.inboxes.bounded(r.Context())
	defer cancel()
	run, err := src.eng.GetRun(ctx, id)
	if errors.Is(err, engine.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no run %s; nothing was done.", id), nil)
		return
	}
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "The run could not be read from the database.", err)
		return
	}
	ok, err := s.mayAct(ctx, a, run.Namespace)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "The Kubernetes API server could not say whether you may act on this run; nothing was done.", err)
		return
	}
	if !ok {
		s.fail(w, r, http.StatusForbidden, fmt.Sprintf(
			"You may read this run but not act on it: that needs %s on workflowruns.%s in namespace %s. Nothing was done.",
			actVerb, apiGroup, run.Namespace), nil)
		return
	}
	eng, err := s.actor.Engine(ctx, src.name)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, fmt.Sprintf("This console cannot write to inbox %s now; nothing was done.", src.name), err)
		return
	}
	done, status, msg, err := s.act(ctx, eng, a, run, action, r.PostForm)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "The action could not be written to the database; nothing was done.", err)
		return
	}
	if msg != "" {
		s.fail(w, r, status, msg, nil)
		return
	}
	s.log.Info("Console action", "action", action, "run", id, "namespace", run.Namespace, "user", a.who.Name, "outcome", done)
	http.Redirect(w, r, "/runs/"+id+"?done="+url.QueryEscape(done), http.StatusSeeOther)
}

// act makes an action on run: the notice to show after it (done), or a
// refusal (status and msg), or the database's error.
func (s *Server) act(ctx context.Context, eng *engine.Engine, a access, run engine.Run, action string,
	form url.Values) (done string, status int, msg string, err error) {
	switch action {
	case "cancel":
		ok, err := eng.CancelRunAs(ctx, run.ID, by(a))
		if err != nil {
			return "", 0, "", err
		}
		if !ok {
			return "not-cancelled", 0, "", nil
		}
		return "cancelled", 0, "", nil
	case "retry":
		if run.Source != nil {
			return "", http.StatusConflict, fmt.Sprintf("The run is WorkflowRun %s/%s's: retry it there "+
				"(kubectl workflow retry %s -n %s raises its spec.retries), so that the object keeps count. Nothing was done.",
				run.Source.Namespace, run.Source.Name, run.Source.Name, run.Source.Namespace), nil
		}
		err := eng.RetryRun(ctx, engine.RetryParams{ID: run.ID, By: by(a)})
		switch {
		case errors.Is(err, engine.ErrInvalid), errors.Is(err, engine.ErrNotFound):
			return "", http.StatusConflict, fmt.Sprintf("The run cannot be retried: %s. Nothing was done.", strings.TrimPrefix(err.Error(), "retry run "+run.ID+": ")), nil
		case err != nil:
			return "", 0, "", err
		}
		return "retried", 0, "", nil
	case "signal":
		name, key := strings.TrimSpace(form.Get("name")), strings.TrimSpace(form.Get("key"))
		payload := strings.TrimSpace(form.Get("payload"))
		if problem := engine.ValidateStepName(name); problem != nil {
			return "", http.StatusBadRequest, "The signal's name is not one a run can wait for: " + problem.Error() + ". Nothing was sent.", nil
		}
		if step := form.Get("step"); step != "" {
			// An approval answers one wait: a form left open, or sent
			// twice, must not answer the run's next wait for the same
			// signal.
			if run.Wait == nil || run.Wait.Kind != engine.StepKindSignal || run.Wait.Step != step || run.Wait.Signal != name {
				return "", http.StatusConflict, fmt.Sprintf("The run no longer waits for %s at step %s (someone answered it, "+
					"or it moved on). Nothing was sent.", name, step), nil
			}
			key = "console-approval:" + step
		}
		var raw json.RawMessage
		if payload != "" {
			if !json.Valid([]byte(payload)) {
				return "", http.StatusBadRequest, "The payload is not JSON. Nothing was sent.", nil
			}
			raw = json.RawMessage(payload)
		}
		res, err := eng.SendSignal(ctx, engine.SignalParams{RunID: run.ID, Name: name, Payload: raw, IdempotencyKey: key, By: by(a)})
		switch {
		case errors.Is(err, engine.ErrInvalid):
			return "", http.StatusBadRequest, fmt.Sprintf("The signal was refused: %v. Nothing was sent.", err), nil
		case errors.Is(err, engine.ErrNotFound), errors.Is(err, engine.ErrRunFinished):
			return "", http.StatusConflict, fmt.Sprintf("The signal was refused: %v. Nothing was sent.", err), nil
		case err != nil:
			return "", 0, "", err
		}
		if res.Duplicate {
			return "signal-repeated", 0, "", nil
		}
		return "signalled", 0, "", nil
	}
	return "", http.StatusNotFound, "There is no such action: a run is cancelled, retried or signalled.", nil
}

// runActions is what a run's page offers its viewer.
type runActions struct {
	// Allowed says the viewer may act on the run (patch WorkflowRuns of
	// its namespace); Why says why not, when it matters.
	Allowed bool
	Why     string
	// CSRF is the forms' token.
	CSRF string
	// Cancel, Retry and Signal say which actions the run's state allows.
	Cancel, Retry, Signal bool
	// RetryWith is how to retry a WorkflowRun's run (on the object, which
	// keeps count), when it may be retried.
	RetryWith string
	// Waits names the signal the run is parked on ("" when none), and
	// WaitStep the step that will take it.
	Waits, WaitStep string
	// Done is the notice of the action just made.
	Done string
}

// runActions says what the viewer may do to run from its page.
func (s *Server) runActions(ctx context.Context, a access, run engine.Run, done string) runActions {
	act := runActions{Done: actionDone(done), CSRF: a.csrf}
	if s.actor == nil {
		return act
	}
	if s.gate == nil {
		act.Why = "Actions need the console's Kubernetes authentication (--console-auth=kubernetes)."
		return act
	}
	ok, err := s.mayAct(ctx, a, run.Namespace)
	if err != nil {
		s.log.Warn("Console could not review a viewer's actions", "user", a.who.Name, "namespace", run.Namespace, "error", err)
		act.Why = "The Kubernetes API server could not say whether you may act on this run."
		return act
	}
	if !ok {
		act.Why = fmt.Sprintf("Acting on this run needs %s on workflowruns.%s in namespace %s.", actVerb, apiGroup, run.Namespace)
		return act
	}
	act.Allowed = true
	unfinished := (run.Status == engine.StatusPending || run.Status == engine.StatusLeased) && run.DeletedAt == nil
	act.Cancel, act.Signal = unfinished, unfinished
	act.Retry = (run.Status == engine.StatusFailed || run.Status == engine.StatusCancelled) && run.DeletedAt == nil &&
		run.ParentID == "" && run.Source == nil
	if run.Source != nil && (run.Status == engine.StatusFailed || run.Status == engine.StatusCancelled) {
		act.RetryWith = fmt.Sprintf("kubectl workflow retry %s -n %s", run.Source.Name, run.Source.Namespace)
	}
	if run.Wait != nil && run.Wait.Kind == engine.StepKindSignal {
		act.Waits, act.WaitStep = run.Wait.Signal, run.Wait.Step
	}
	return act
}
