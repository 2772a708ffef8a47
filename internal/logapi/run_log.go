package logapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	logsv1alpha1 "github.com/simple-workflow/simple-workflow/internal/logapi/v1alpha1"
)

// logQuery is what a read asks for.
type logQuery struct {
	// attempt is the attempt asked for; 0 for the latest that logged.
	attempt int
	tail    int
}

// parseQuery reads ?attempt=N&tail=M.
func parseQuery(q url.Values) (logQuery, error) {
	lq := logQuery{tail: logsv1alpha1.DefaultTail}
	if v := q.Get(logsv1alpha1.ParamAttempt); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return lq, badRequest("attempt must be a whole number from 1, got %q", v)
		}
		lq.attempt = n
	}
	if v := q.Get(logsv1alpha1.ParamTail); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > logsv1alpha1.MaxTail {
			return lq, badRequest("tail must be a whole number from 1 to %d, got %q", logsv1alpha1.MaxTail, v)
		}
		lq.tail = n
	}
	return lq, nil
}

// serveRunLog serves GET .../namespaces/{namespace}/workflowrunlogs/{name}.
func (s *Server) serveRunLog(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if r.Method != http.MethodGet {
		writeStatus(w, apierrors.NewMethodNotSupported(logsResource, r.Method))
		return
	}
	log, err := s.runLog(r.Context(), userOf(r.Context()), ns, name, r.URL.Query())
	if err != nil {
		var status apierrors.APIStatus
		if !errors.As(err, &status) {
			s.cfg.Logger.Error("Log API could not serve a run's log", "namespace", ns, "name", name, "error", err)
			err = apierrors.NewInternalError(fmt.Errorf("the log of workflowrun %s/%s could not be read", ns, name))
		}
		writeStatus(w, err)
		return
	}
	writeJSON(w, http.StatusOK, log)
}

// runLog authorizes user and reads the log of WorkflowRun ns/name. The
// errors meant for the client are API statuses; any other is internal.
func (s *Server) runLog(ctx context.Context, user User, ns, name string, params url.Values) (*logsv1alpha1.WorkflowRunLog, error) {
	if user.Name == "" {
		return nil, apierrors.NewUnauthorized("the request names no user")
	}
	q, err := parseQuery(params)
	if err != nil {
		return nil, err
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, notFound(name, fmt.Sprintf("workflowrun %s/%s not found: not a name a WorkflowRun has", ns, name))
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		return nil, apierrors.NewTooManyRequests("the log API serves a few reads at once; try again", 1)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	allowed, reason, err := mayGetLog(ctx, s.cfg.Kube, user, ns, name)
	if err != nil {
		return nil, err
	}
	if !allowed {
		s.cfg.Logger.Info("Log API denied a read", "user", user.Name, "namespace", ns, "name", name, "reason", reason)
		return nil, apierrors.NewForbidden(logsResource, name, fmt.Errorf("user %q cannot get resource %q in API group %q in the namespace %q",
			user.Name, logsv1alpha1.Resource, logsv1alpha1.Group, ns))
	}
	var wfr workflowv1alpha1.WorkflowRun
	if err := s.cfg.Runs.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &wfr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, notFound(name, fmt.Sprintf("workflowrun %s/%s not found", ns, name))
		}
		return nil, fmt.Errorf("read workflowrun %s/%s: %w", ns, name, err)
	}
	runID := wfr.Status.RunID
	if runID == "" {
		return nil, notFound(name, fmt.Sprintf("workflowrun %s/%s has no run in the inbox yet (status.runID is empty)", ns, name))
	}
	inbox, err := s.cfg.Inboxes.InboxFor(ctx, ns)
	if err != nil {
		s.cfg.Logger.Warn("Log API could not reach the inbox of a namespace", "namespace", ns, "error", err)
		return nil, unavailable("the inbox of namespace %s cannot be read now; try again later", ns)
	}
	out, err := readLog(ctx, inbox, ns, name, runID, q)
	if err != nil {
		var status apierrors.APIStatus
		if !errors.As(err, &status) {
			s.cfg.Logger.Warn("Log API could not read a run's log", "namespace", ns, "name", name, "run", runID, "error", err)
			return nil, unavailable("the inbox of namespace %s does not answer; try again later", ns)
		}
		return nil, err
	}
	return out, nil
}

// readLog reads the log of run runID of WorkflowRun ns/name from inbox:
// its attempts that logged and the newest q.tail lines of one. The run
// must belong to namespace ns.
func readLog(ctx context.Context, inbox Inbox, ns, name, runID string, q logQuery) (*logsv1alpha1.WorkflowRunLog, error) {
	srcs, err := inbox.SourcesOf(ctx, []string{runID})
	if err != nil {
		return nil, err
	}
	if len(srcs) != 1 || srcs[0].Source.Namespace != ns {
		return nil, notFound(name, fmt.Sprintf("the run %s of workflowrun %s/%s is not in the inbox (deleted after its retention?)", runID, ns, name))
	}
	attempts, err := inbox.RunLogAttempts(ctx, runID)
	if err != nil {
		return nil, err
	}
	out := &logsv1alpha1.WorkflowRunLog{
		TypeMeta: metav1.TypeMeta{APIVersion: logsv1alpha1.GroupVersion.String(), Kind: logsv1alpha1.Kind},
		Metadata: logsv1alpha1.LogMeta{Name: name, Namespace: ns},
		RunID:    runID,
		Attempts: []logsv1alpha1.AttemptSummary{},
		Lines:    []logsv1alpha1.Line{},
	}
	shown := -1
	for i, a := range attempts {
		out.Attempts = append(out.Attempts, logsv1alpha1.AttemptSummary{Attempt: a.Attempt, Lines: a.Lines, Dropped: a.Dropped})
		if q.attempt == 0 || a.Attempt == q.attempt {
			shown = i
		}
	}
	if shown < 0 {
		if q.attempt == 0 {
			return out, nil // nothing logged yet
		}
		return nil, notFound(name, fmt.Sprintf("attempt %d of workflowrun %s/%s logged nothing", q.attempt, ns, name))
	}
	a := attempts[shown]
	out.Attempt = a.Attempt
	n := min(a.Lines, q.tail)
	out.Omitted = a.Lines - n
	if n == 0 {
		return out, nil
	}
	lines, err := inbox.RunLogs(ctx, runID, a.Attempt, a.FirstSeq-1+int64(out.Omitted), n)
	if err != nil {
		return nil, err
	}
	for _, l := range lines {
		if l.Attempt != a.Attempt {
			break // the next attempt's
		}
		out.Lines = append(out.Lines, logsv1alpha1.Line{Attempt: l.Attempt, Seq: l.Seq, Time: l.At.UTC(),
			Level: string(l.Level), Message: l.Message})
	}
	// At most maxLogBytes of messages, the newest: the older lines count
	// as omitted.
	total, keep := 0, len(out.Lines)
	for i := len(out.Lines) - 1; i >= 0; i-- {
		total += len(out.Lines[i].Message)
		if total > maxLogBytes {
			break
		}
		keep = i
	}
	if keep > 0 && total > maxLogBytes {
		out.Omitted += keep
		out.Lines = out.Lines[keep:]
	}
	return out, nil
}
