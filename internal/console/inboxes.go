package console

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// DefaultInbox names the inbox of Config.DB: the database of the
// namespaces no WorkflowInbox selects.
const DefaultInbox = "default"

// InboxURL is one inbox database besides the default one: a
// WorkflowInbox's name and the URL its Secret holds.
type InboxURL struct {
	// Name is the WorkflowInbox's name.
	Name string
	// URL is its database's URL; empty when it could not be read (Err
	// says why): the console keeps the pool it has, or shows the inbox
	// as not read.
	URL string
	Err error
}

// InboxLister lists the inboxes besides the default one. The console reads
// each (as Config.Role, in read-only transactions) and shows their runs
// beside the default inbox's.
type InboxLister interface {
	Inboxes(ctx context.Context) ([]InboxURL, error)
}

// Timing of the inboxes the console reads.
const (
	// inboxRefresh is how often the list of inboxes is read again.
	inboxRefresh = 10 * time.Second
	// sourceTimeout bounds one inbox's part of a request: an inbox whose
	// database does not answer delays a page by at most this long. It is
	// longer than the statements' own timeout (OpenPool), so that a slow
	// statement fails as such, and leaves its inbox in the pages.
	sourceTimeout = 6 * time.Second
	// listTimeout bounds listing the inboxes (a Secret read each).
	listTimeout = 20 * time.Second
	// sourceQuiet is how long an inbox whose read failed is left out of
	// the pages (and said to be unreachable) before it is tried again.
	sourceQuiet = 5 * time.Second
)

// source is one inbox database the console reads.
type source struct {
	name string
	db   *pgxpool.Pool
	eng  *engine.Engine
}

// inboxProblem is an inbox a page could not read, and why (for the log;
// the page says only that it could not be read).
type inboxProblem struct {
	Name string
	err  error
}

// sourceState is one inbox the console knows of: open (src set) or not,
// and since when it failed.
type sourceState struct {
	src    *source
	hash   [32]byte // of the URL it was opened with
	stop   context.CancelFunc
	err    error // why it could not be opened, or its last failed read
	failed time.Time
}

// inboxes holds the console's read pools: the default inbox's (Config.DB)
// and one per inbox the lister names, opened, replaced and closed as the
// list changes.
type inboxes struct {
	lister InboxLister
	role   string
	log    *slog.Logger
	// listen follows an inbox's notifications until ctx ends.
	listen func(ctx context.Context, src *source)

	mu     sync.Mutex
	states map[string]*sourceState
}

func newInboxes(def *source, lister InboxLister, role string, log *slog.Logger) *inboxes {
	in := &inboxes{lister: lister, role: role, log: log, states: map[string]*sourceState{}}
	in.states[DefaultInbox] = &sourceState{src: def}
	return in
}

// several reports whether the console reads more than the default inbox.
func (in *inboxes) several() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.states) > 1
}

// current returns the inboxes to read now, the default first, and those
// that cannot be read (not opened, or failed within sourceQuiet).
func (in *inboxes) current() ([]*source, []inboxProblem) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var up []*source
	var down []inboxProblem
	for _, name := range in.namesLocked() {
		st := in.states[name]
		switch {
		case st.src == nil:
			down = append(down, inboxProblem{Name: name, err: st.err})
		case !st.failed.IsZero() && time.Since(st.failed) < sourceQuiet:
			down = append(down, inboxProblem{Name: name, err: st.err})
		default:
			up = append(up, st.src)
		}
	}
	return up, down
}

// namesLocked returns the inboxes' names, the default first, the others
// sorted (in.mu held).
func (in *inboxes) namesLocked() []string {
	names := make([]string, 0, len(in.states))
	for name := range in.states {
		if name != DefaultInbox {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return append([]string{DefaultInbox}, names...)
}

// bounded returns ctx bounded for the reads of one page from one inbox
// (twice sourceTimeout) when there are several inboxes: one that stops
// answering half-way through a page does not hold it.
func (in *inboxes) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if !in.several() {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, 2*sourceTimeout)
}

// byName returns the open inbox named name.
func (in *inboxes) byName(name string) (*source, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	st, ok := in.states[name]
	if !ok || st.src == nil {
		return nil, false
	}
	return st.src, true
}

// failed records that a read of src failed (not because its request
// ended): it is left out for sourceQuiet.
func (in *inboxes) failed(src *source, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if st, ok := in.states[src.name]; ok && st.src == src {
		st.failed, st.err = time.Now(), err
	}
}

// answered records that a read of src succeeded.
func (in *inboxes) answered(src *source) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if st, ok := in.states[src.name]; ok && st.src == src && !st.failed.IsZero() {
		st.failed, st.err = time.Time{}, nil
	}
}

// refreshLoop reads the list of inboxes now and every inboxRefresh until
// ctx ends, then closes the pools it opened.
func (in *inboxes) refreshLoop(ctx context.Context) {
	if in.lister == nil {
		return
	}
	defer in.closeAll()
	tick := time.NewTicker(inboxRefresh)
	defer tick.Stop()
	for {
		in.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// refresh opens the inboxes listed that are not open, opens again those
// whose URL changed (the new pool replaces the old once it is open; the old
// one stays while the new one fails), and closes those no longer listed. An
// inbox listed without a URL (its Secret could not be read) keeps its pool,
// or is shown as not read. A failure to list keeps the inboxes as they are.
func (in *inboxes) refresh(ctx context.Context) {
	listCtx, cancel := context.WithTimeout(ctx, listTimeout)
	list, err := in.lister.Inboxes(listCtx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			in.log.Warn("Console could not list the inboxes; it keeps reading those it knows", "error", err)
		}
		return
	}
	listed := map[string]InboxURL{}
	for _, u := range list {
		if u.Name != DefaultInbox && u.Name != "" {
			listed[u.Name] = u
		}
	}
	in.mu.Lock()
	for name := range in.states {
		if _, ok := listed[name]; !ok && name != DefaultInbox {
			in.dropLocked(name)
		}
	}
	var open []InboxURL
	for name, u := range listed {
		st, ok := in.states[name]
		switch {
		case u.URL == "" && ok && st.src != nil:
			// Its Secret could not be read this time: keep reading it.
		case u.URL == "":
			in.states[name] = &sourceState{err: fmt.Errorf("inbox %s: %w", name, u.Err)}
		case !ok || st.src == nil || st.hash != sha256.Sum256([]byte(u.URL)):
			open = append(open, u)
		}
	}
	in.mu.Unlock()
	var wg sync.WaitGroup
	for _, u := range open {
		wg.Go(func() { in.open(ctx, u.Name, u.URL) })
	}
	wg.Wait()
}

// open opens the read pool of inbox name and starts following its
// notifications, in place of the pool it had; a failure is kept (beside
// the pool it had, if any), for the pages to say, and tried again at the
// next refresh.
func (in *inboxes) open(ctx context.Context, name, url string) {
	hash := sha256.Sum256([]byte(url))
	openCtx, cancel := context.WithTimeout(ctx, sourceTimeout)
	pool, err := OpenReadPool(openCtx, url, in.role, in.log.With("inbox", name))
	cancel()
	var src *source
	if err == nil {
		eng, engErr := engine.New(pool)
		if engErr != nil {
			pool.Close()
			err = engErr
		} else {
			src = &source{name: name, db: pool, eng: eng}
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	cur, ok := in.states[name]
	if ok && cur.src != nil && cur.hash == hash {
		// Opened meanwhile by another refresh.
		if src != nil {
			go src.db.Close()
		}
		return
	}
	if err != nil {
		if ctx.Err() == nil {
			in.log.Warn("Console could not open an inbox's database; its runs are not shown", "inbox", name, "error", err)
		}
		if ok && cur.src != nil {
			return // the pool it had stays
		}
		in.states[name] = &sourceState{hash: hash, err: fmt.Errorf("inbox %s: %w", name, err)}
		return
	}
	in.dropLocked(name)
	st := &sourceState{src: src, hash: hash}
	listenCtx, stop := context.WithCancel(ctx)
	st.stop = stop
	in.states[name] = st
	if in.listen != nil {
		go in.listen(listenCtx, src)
	}
}

// dropLocked closes inbox name's pool and forgets it (in.mu held).
func (in *inboxes) dropLocked(name string) {
	st, ok := in.states[name]
	if !ok {
		return
	}
	delete(in.states, name)
	if st.stop != nil {
		st.stop()
	}
	if st.src != nil {
		// Requests under way may still use it: close it when they are done
		// (Close waits for acquired connections to be released).
		go st.src.db.Close()
	}
}

// closeAll closes every pool the console opened (not the default one).
func (in *inboxes) closeAll() {
	in.mu.Lock()
	defer in.mu.Unlock()
	for name := range in.states {
		if name != DefaultInbox {
			in.dropLocked(name)
		}
	}
}

// each runs fn on every inbox that can be read, all at once, each bounded
// by sourceTimeout, and returns the inboxes left out or failing. It returns
// an error only when no inbox could be read, so a page shows what it can.
// fn must not keep what it reads from one inbox apart from another's
// without its own lock: the calls run concurrently.
func (s *Server) each(ctx context.Context, fn func(ctx context.Context, src *source) error) ([]inboxProblem, error) {
	up, down := s.inboxes.current()
	if len(up) == 1 && len(down) == 0 {
		// One inbox: no timeout of the console's own, no problem list (its
		// failure is the page's).
		return nil, fn(ctx, up[0])
	}
	errs := make([]error, len(up))
	var wg sync.WaitGroup
	for i, src := range up {
		wg.Go(func() {
			c, cancel := context.WithTimeout(ctx, sourceTimeout)
			defer cancel()
			errs[i] = fn(c, src)
		})
	}
	wg.Wait()
	var firstErr error
	failures := 0
	for i, err := range errs {
		switch {
		case err == nil:
			s.inboxes.answered(up[i])
		case ctx.Err() != nil:
			return nil, ctx.Err()
		default:
			if unreachable(err) {
				s.inboxes.failed(up[i], err)
			}
			s.log.Error("Console could not read an inbox", "inbox", up[i].name, "error", err)
			down = append(down, inboxProblem{Name: up[i].name, err: err})
			failures++
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if len(up) == 0 {
		return down, errors.New("no inbox database can be read")
	}
	if failures == len(up) {
		return down, firstErr
	}
	sort.Slice(down, func(i, j int) bool { return down[i].Name < down[j].Name })
	return down, nil
}

// inboxRow is an inbox as the overview lists it, when there are several.
type inboxRow struct {
	Name string
	// Read says the overview holds its runs.
	Read bool
}

// noteInboxes records in ov the inboxes that could not be read and, when
// listed (for the viewers of every namespace: the inboxes are the
// cluster's), each inbox and whether it was read.
func (s *Server) noteInboxes(ov *overview, problems []inboxProblem, listed bool) {
	bad := map[string]bool{}
	for _, p := range problems {
		if !bad[p.Name] {
			bad[p.Name] = true
			ov.Unread = append(ov.Unread, p.Name)
		}
	}
	sort.Strings(ov.Unread)
	if !listed || !s.inboxes.several() {
		return
	}
	s.inboxes.mu.Lock()
	names := s.inboxes.namesLocked()
	s.inboxes.mu.Unlock()
	for _, name := range names {
		ov.Inboxes = append(ov.Inboxes, inboxRow{Name: name, Read: !bad[name]})
	}
}

// unreachable reports whether a read's error says its database did not
// answer (no connection, or no answer in time), rather than that the
// database refused or failed the statement (a statement timeout, a missing
// function): only the former leaves an inbox out of the pages for a while.
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr)
}
