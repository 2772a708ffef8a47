package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Bounds of the schedules pages.
const (
	// maxSchedules is how many schedules the schedules page lists.
	maxSchedules = 1000
	// maxScheduleRuns is how many of its latest runs a schedule's page shows.
	maxScheduleRuns = 50
	// maxScheduleError bounds a schedule's last error as shown (in characters).
	maxScheduleError = 2000
)

// scheduleNameForm is a schedule's name, as workflow_schedule's check has it.
var scheduleNameForm = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$`)

// noNamespace stands for "no namespace" (a schedule made with SQL) in a
// schedule page's path.
const noNamespace = "-"

// scheduleRow is a schedule as the schedules pages show it.
type scheduleRow struct {
	ID string
	// Namespace is the mirrored WorkflowSchedule's; "" for a SQL schedule.
	Namespace         string
	Name              string
	Cron              string
	TimeZone          string
	Type              string
	ConcurrencyPolicy string
	Suspend           bool
	NextTickAt        time.Time
	LastTickAt        *time.Time
	LastOutcome       string
	LastError         string
	UnfinishedRuns    int64
	// Inbox names the inbox database the schedule is in.
	Inbox string
}

// Path is the address of the schedule's page (naming the inbox of a SQL
// schedule unless it is the default one: SQL schedules of one name may be
// in several).
func (r scheduleRow) Path() string {
	ns := noNamespace
	if r.Namespace != "" {
		ns = r.Namespace
	}
	p := "/schedules/" + url.PathEscape(ns) + "/" + url.PathEscape(r.Name)
	if r.Namespace == "" && r.Inbox != "" && r.Inbox != DefaultInbox {
		p += "?inbox=" + url.QueryEscape(r.Inbox)
	}
	return p
}

// Label names the schedule: namespace/name, or the name of a SQL schedule.
func (r scheduleRow) Label() string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// scheduleRunRow is one of a schedule's runs, with the tick its key names.
type scheduleRunRow struct {
	engine.ScheduleRun
	// Tick is the tick the run was recorded for; nil when its key names
	// none this console can read (TickText then holds what it names).
	Tick     *time.Time
	TickText string
}

// schedulesView is what the schedules page shows.
type schedulesView struct {
	Schedules []scheduleRow
	More      bool
	Now       time.Time
	// Several says the console reads more than one inbox.
	Several bool
}

// scheduleView is what a schedule's page shows.
type scheduleView struct {
	Schedule scheduleRow
	Runs     []scheduleRunRow
	Limit    int
	Now      time.Time
	// Several says the console reads more than one inbox.
	Several bool
}

// readSchedules reads schedules through workflow.list_schedules from every
// inbox: those of a namespace ("" with direct: the SQL ones) or of every
// namespace (nil), of one name or all (""). Each value is a parameter. The
// rows come in the inboxes' order (the default first), each inbox's in its
// own order.
func (s *Server) readSchedules(ctx context.Context, namespace *string, name string) ([]scheduleRow, []inboxProblem, error) {
	var mu sync.Mutex
	byInbox := map[string][]scheduleRow{}
	problems, err := s.each(ctx, func(ctx context.Context, src *source) error {
		rows, err := src.readSchedules(ctx, namespace, name)
		mu.Lock()
		byInbox[src.name] = rows
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, problems, err
	}
	names := make([]string, 0, len(byInbox))
	for n := range byInbox {
		if n != DefaultInbox {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := byInbox[DefaultInbox]
	for _, n := range names {
		out = append(out, byInbox[n]...)
	}
	return out, problems, nil
}

// readSchedules reads one inbox's schedules for Server.readSchedules.
func (src *source) readSchedules(ctx context.Context, namespace *string, name string) ([]scheduleRow, error) {
	var nameArg any
	if name != "" {
		nameArg = name
	}
	rows, err := src.db.Query(ctx, `
select id::text, coalesce(source_namespace, ''), name, cron, time_zone, type, concurrency_policy, suspend,
       next_tick_at, last_tick_at, coalesce(last_outcome, ''), coalesce(left(last_error, $3::integer), ''),
       unfinished_runs
from workflow.list_schedules($1::text, $2::text, null)`, namespace, nameArg, maxScheduleError)
	if err != nil {
		return nil, fmt.Errorf("list schedules of inbox %s: %w", src.name, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (scheduleRow, error) {
		r := scheduleRow{Inbox: src.name}
		err := row.Scan(&r.ID, &r.Namespace, &r.Name, &r.Cron, &r.TimeZone, &r.Type, &r.ConcurrencyPolicy, &r.Suspend,
			&r.NextTickAt, &r.LastTickAt, &r.LastOutcome, &r.LastError, &r.UnfinishedRuns)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("list schedules of inbox %s: %w", src.name, err)
	}
	return out, nil
}

// widen returns a with the namespaces among namespaces that it was not
// computed for checked too, by the same reviews. A viewer's access is
// computed for the namespaces that have runs or worker pools; a schedule's
// namespace may have neither yet. Only namespaces of existing schedules are
// passed here, so a request cannot make the console ask the API server
// about names it makes up.
func (s *Server) widen(ctx context.Context, r *http.Request, a access, namespaces []string) (access, error) {
	if a.all || s.gate == nil {
		return a, nil
	}
	seen := map[string]bool{}
	var ask []string
	for _, ns := range namespaces {
		if ns != "" && !a.namespaces[ns] && !seen[ns] {
			seen[ns] = true
			ask = append(ask, ns)
		}
	}
	if len(ask) == 0 {
		return a, nil
	}
	more, err := s.gate.access(ctx, bearerToken(r), ask)
	if err != nil {
		return a, err
	}
	wide := a
	wide.all = a.all || more.all
	wide.namespaces = make(map[string]bool, len(a.namespaces)+len(more.namespaces))
	for ns := range a.namespaces {
		wide.namespaces[ns] = true
	}
	for ns := range more.namespaces {
		wide.namespaces[ns] = true
	}
	return wide, nil
}

// failReview answers a request whose viewer's permissions could not be
// checked.
func (s *Server) failReview(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ErrUnauthenticated) {
		s.unauthorized(w, r)
		return
	}
	s.fail(w, r, http.StatusServiceUnavailable, "The Kubernetes API server could not check your token; try again.", err)
}

// serveSchedules lists the schedules the viewer may see: those of the
// namespaces it may read, and the SQL schedules (of no namespace) only with
// the inbox-wide permission.
func (s *Server) serveSchedules(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	all, problems, err := s.readSchedules(ctx, nil, "")
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "The schedules could not be read from the database.", err)
		return
	}
	a := accessOf(ctx)
	if !a.all {
		namespaces := make([]string, 0, len(all))
		for _, sc := range all {
			namespaces = append(namespaces, sc.Namespace)
		}
		if a, err = s.widen(ctx, r, a, namespaces); err != nil {
			s.failReview(w, r, err)
			return
		}
	}
	v := schedulesView{Now: time.Now(), Several: s.inboxes.several()}
	for _, sc := range all {
		if !a.may(sc.Namespace) {
			continue
		}
		if len(v.Schedules) == maxSchedules {
			v.More = true
			break
		}
		v.Schedules = append(v.Schedules, sc)
	}
	s.render(w, r, "schedules", http.StatusOK, page{Title: "Schedules", Nav: "schedules", Live: "?", Data: v,
		Unread: unread(problems)})
}

// parseSchedulePath checks a schedule page's path values: a namespace name
// or "-" (none), and a schedule's name. It returns the namespace ("" for
// none).
func parseSchedulePath(namespace, name string) (string, error) {
	if namespace != noNamespace && (len(namespace) > 63 || !namespaceForm.MatchString(namespace)) {
		return "", errors.New(`a schedule's page is /schedules/<namespace>/<name>: the namespace is a Kubernetes namespace name, or "-" for a schedule made with SQL`)
	}
	if len(name) > 253 || !scheduleNameForm.MatchString(name) {
		return "", errors.New("a schedule's name is lowercase letters, digits, '.', '_' and '-', starting and ending with a letter or digit, at most 253 characters")
	}
	if namespace == noNamespace {
		return "", nil
	}
	return namespace, nil
}

// serveSchedule shows a schedule and its latest runs. A schedule the viewer
// may not see is not found, like one that does not exist.
func (s *Server) serveSchedule(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ns, err := parseSchedulePath(r.PathValue("namespace"), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err.Error(), nil)
		return
	}
	name := r.PathValue("name")
	label := name
	if ns != "" {
		label = ns + "/" + name
	}
	notFound := func() {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no schedule %s.", label), nil)
	}
	found, problems, err := s.readSchedules(ctx, &ns, name)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "The schedule could not be read from the database.", err)
		return
	}
	// One per inbox at most; a SQL schedule's name may be in several, a
	// namespace's schedule only while its namespace moves. ?inbox= picks
	// one, else the first (the default inbox's).
	if want := r.URL.Query().Get("inbox"); want != "" {
		found = slices.DeleteFunc(found, func(sc scheduleRow) bool { return sc.Inbox != want })
	}
	if len(found) == 0 && len(problems) > 0 && (accessOf(ctx).all || accessOf(ctx).may(ns)) {
		// Not found where the console could read, and the viewer may read
		// its namespace: it may be in an inbox that did not answer. (A
		// viewer who may not is told "not found", as for one that exists.)
		s.fail(w, r, http.StatusServiceUnavailable, fmt.Sprintf(
			"Schedule %s is not in the inboxes the console could read, and %s. Try again shortly.",
			label, unreadText(accessOf(ctx), problems)), nil)
		return
	}
	if len(found) == 0 {
		notFound()
		return
	}
	a, err := s.widen(ctx, r, accessOf(ctx), []string{ns})
	if err != nil {
		s.failReview(w, r, err)
		return
	}
	if !a.may(ns) {
		notFound()
		return
	}
	sc := found[0]
	src, ok := s.inboxes.byName(sc.Inbox)
	if !ok {
		s.fail(w, r, http.StatusServiceUnavailable, "The schedule's inbox was closed meanwhile; try again.", nil)
		return
	}
	readCtx, cancel := s.inboxes.bounded(ctx)
	defer cancel()
	runs, err := src.eng.ScheduleLatestRuns(readCtx, ns, name, maxScheduleRuns)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "The schedule's runs could not be read from the database.", err)
		return
	}
	v := scheduleView{Schedule: sc, Limit: maxScheduleRuns, Now: time.Now(), Several: s.inboxes.several()}
	for _, run := range runs {
		row := scheduleRunRow{ScheduleRun: run}
		row.Tick, row.TickText = scheduleTick(sc, run.IdempotencyKey)
		v.Runs = append(v.Runs, row)
	}
	s.render(w, r, "schedule", http.StatusOK, page{Title: "Schedule " + sc.Label(), Nav: "schedules", Live: "?", Data: v})
}

// scheduleTick reads the tick a run's idempotency key names (see the
// schedules section of workflow.sql): schedule:<id>:<UTC time> for a SQL
// schedule, k8s:<namespace>:schedule/<name>/<unix seconds> for a mirrored
// one. A key it cannot read gives its tail as text (at most 64 bytes).
func scheduleTick(sc scheduleRow, key string) (*time.Time, string) {
	prefix := "schedule:" + sc.ID + ":"
	if sc.Namespace != "" {
		prefix = "k8s:" + sc.Namespace + ":schedule/" + sc.Name + "/"
	}
	tail, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return nil, ""
	}
	if sc.Namespace == "" {
		if t, err := time.Parse("2006-01-02T15:04:05Z", tail); err == nil {
			return &t, ""
		}
	} else if len(tail) <= 12 {
		if secs, err := strconv.ParseInt(tail, 10, 64); err == nil && secs >= 0 {
			t := time.Unix(secs, 0).UTC()
			return &t, ""
		}
	}
	if len(tail) > 64 {
		tail = strings.ToValidUTF8(tail[:64], "") + "…"
	}
	return nil, tail
}
