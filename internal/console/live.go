package console

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Timing of live updates.
const (
	// settle is how long after a notification the console looks, so that
	// one look covers a burst of them.
	settle = 100 * time.Millisecond
	// followUp is when it looks once more after the last notification: a
	// transaction that found another notifying at the same time did not
	// notify itself, and may commit just after the first look.
	followUp = 400 * time.Millisecond
	// listInterval is the least time between two updates of the pages that
	// show many runs (the overview, the list), which change all the time
	// on a busy inbox.
	listInterval = 2 * time.Second
	// keepAlive is how often an idle stream sends a comment, so proxies do
	// not close it.
	keepAlive = 25 * time.Second
	// recheck is how often the open run pages are looked at without a
	// notification: a journal entry or a signal notifies nothing.
	recheck = 2 * time.Second
	// maxSubscribers bounds the open streams, maxPerViewer those of one
	// viewer (see viewerOf); more are refused (429).
	maxSubscribers = 256
	maxPerViewer   = 16
)

// subscriber is one open event stream: of one run's page (run set), or of a
// page of many runs.
type subscriber struct {
	viewer  viewer
	run     string
	version string
	joined  time.Time
	ch      chan struct{}
}

// hub tells the open streams when what their page shows changed.
type hub struct {
	mu       sync.Mutex
	subs     map[*subscriber]struct{}
	kick     chan struct{}
	lastList time.Time
	// lastNotified is when the latest notification arrived.
	lastNotified time.Time
	// listening is set once the listener has connected and LISTENs.
	listening bool
	// listLater is set while a look is scheduled for the pages of many runs.
	listLater bool
}

func newHub() *hub {
	return &hub{subs: map[*subscriber]struct{}{}, kick: make(chan struct{}, 1)}
}

// viewer is whom a stream counts against: an authenticated user, or (on an
// unauthenticated console, which knows no one) a client address. Exactly
// one of the two is set, so a user name never counts as an address.
type viewer struct {
	user    string
	address string
}

// subscribe adds a stream of viewer v; nil and why when there are too many,
// on the console or of v. A run's stream is compared with the run at once
// (the page may be older than the run); a list's is told of the
// notifications that arrive after it joined.
func (h *hub) subscribe(v viewer, run, version string) (*subscriber, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) >= maxSubscribers {
		return nil, "too many open live updates on this console; reload later"
	}
	mine := 0
	for s := range h.subs {
		if s.viewer == v {
			mine++
		}
	}
	if mine >= maxPerViewer {
		return nil, "you have too many open live updates; close some console tabs"
	}
	s := &subscriber{viewer: v, run: run, version: version, joined: time.Now(), ch: make(chan struct{}, 1)}
	h.subs[s] = struct{}{}
	// A run's page is compared with its run at once; for a page of many
	// runs, the inbox's version is read if no other page follows it yet.
	h.poke()
	return s, ""
}

// notified records a notification and asks for a look.
func (h *hub) notified() {
	h.mu.Lock()
	h.lastNotified = time.Now()
	h.mu.Unlock()
	h.poke()
}

// listsDue reports whether the pages of many runs are to be told of a
// change now (h.mu held).
func (h *hub) listsDue() bool {
	if time.Since(h.lastList) < listInterval {
		return false
	}
	for s := range h.subs {
		if s.run == "" && h.lastNotified.After(s.joined) {
			return true
		}
	}
	return false
}

// watchingLists reports whether a page of many runs is open.
func (h *hub) watchingLists() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.watchingListsLocked()
}

// watchingListsLocked is watchingLists with h.mu held.
func (h *hub) watchingListsLocked() bool {
	for s := range h.subs {
		if s.run == "" {
			return true
		}
	}
	return false
}

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, s)
}

// poke asks for a look at the database soon.
func (h *hub) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

func notify(s *subscriber) {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// listenInbox follows the notifications of one inbox until ctx ends.
func (s *Server) listenInbox(ctx context.Context, src *source) {
	// A reconnection may have missed notifications: it counts as one.
	// The first connection missed nothing the pages did not read.
	first := true
	_ = src.eng.Listen(ctx, engine.ListenConfig{
		Channels: []string{engine.ChannelRunChanged, engine.ChannelRunCreated, engine.ChannelRunCancelled},
		OnNotify: func(engine.Notification) { s.hub.notified() },
		OnConnect: func() {
			if src == s.def {
				s.hub.mu.Lock()
				s.hub.listening = true
				s.hub.mu.Unlock()
			}
			if first {
				first = false
				s.hub.poke()
				return
			}
			s.hub.notified()
		},
		Logger: s.log.With("inbox", src.name),
	})
}

// run listens for the inboxes' notifications and looks at what the open
// streams show after each burst of them, once more shortly after, and every
// recheck (claims, completions, journal entries and signals notify nothing:
// the run pages are compared with their runs, the pages of many runs with
// the inbox's version), until ctx ends.
func (s *Server) run(ctx context.Context) error {
	go s.listenInbox(ctx, s.def)
	go s.inboxes.refreshLoop(ctx)
	var again <-chan time.Time
	tick := time.NewTicker(recheck)
	defer tick.Stop()
	// marker is the inbox's version the pages of many runs were last told
	// of (or first saw).
	var marker string
	for {
		select {
		case <-tick.C:
			if !s.hub.watchingLists() {
				marker = ""
			} else if v := s.inboxVersion(ctx); v != "" && marker != "" && v != marker {
				s.hub.notified()
				continue
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-s.hub.kick:
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(settle):
			}
			again = time.After(followUp)
		case <-again:
			again = nil
		}
		if err := s.look(ctx, &marker); err != nil && ctx.Err() == nil {
			s.log.Warn("Console could not look for changes", "error", err)
			again = time.After(followUp)
		}
	}
}

// look tells each stream whose page changed: a run's page when the run's
// version moved, a page of many runs at most every listInterval (and
// records in marker the inbox's version they were told of).
func (s *Server) look(ctx context.Context, marker *string) error {
	h := s.hub
	h.mu.Lock()
	if (*marker == "" && h.watchingListsLocked()) || h.listsDue() {
		h.mu.Unlock()
		if v := s.inboxVersion(ctx); v != "" {
			*marker = v
		}
		h.mu.Lock()
	}
	var runs []string
	seen := map[string]bool{}
	listPages := false
	for sub := range h.subs {
		if sub.run == "" {
			listPages = listPages || h.lastNotified.After(sub.joined)
		} else if !seen[sub.run] {
			seen[sub.run] = true
			runs = append(runs, sub.run)
		}
	}
	if listPages {
		if wait := listInterval - time.Since(h.lastList); wait > 0 {
			if !h.listLater {
				h.listLater = true
				time.AfterFunc(wait, h.poke)
			}
		} else {
			h.lastList, h.listLater = time.Now(), false
			for sub := range h.subs {
				if sub.run == "" && h.lastNotified.After(sub.joined) {
					sub.joined = h.lastNotified
					notify(sub)
				}
			}
		}
	}
	h.mu.Unlock()
	if len(runs) == 0 {
		return nil
	}
	versions, err := s.runVersions(ctx, runs)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		if sub.run == "" {
			continue
		}
		if v := versions[sub.run]; v != sub.version {
			sub.version = v
			notify(sub)
		}
	}
	return nil
}

// runVersions returns a version of each run that moves whenever its page
// would show something new, read from every inbox (a run is in one).
func (s *Server) runVersions(ctx context.Context, ids []string) (map[string]string, error) {
	var mu sync.Mutex
	out := make(map[string]string, len(ids))
	_, err := s.each(ctx, func(ctx context.Context, src *source) error {
		versions, err := src.runVersions(ctx, ids)
		mu.Lock()
		defer mu.Unlock()
		for id, v := range versions {
			out[id] = v
		}
		return err
	})
	return out, err
}

// runVersions returns a version of each run of this inbox among ids that
// moves whenever its page would show something new: its status, attempt,
// update time, and its latest audit event, the number of its journal
// entries, and the latest change of its first children (a DAG's steps,
// durable child runs; at most maxChildren of them are looked at, as its
// page lists).
func (src *source) runVersions(ctx context.Context, ids []string) (map[string]string, error) {
	rows, err := src.db.Query(ctx, `select id::text, version from workflow.run_versions($1::uuid[], $2::integer)`,
		ids, maxChildren)
	if err != nil {
		return nil, fmt.Errorf("run versions in inbox %s: %w", src.name, err)
	}
	out := make(map[string]string, len(ids))
	var id, v string
	if _, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error {
		out[id] = v
		return nil
	}); err != nil {
		return nil, fmt.Errorf("run versions in inbox %s: %w", src.name, err)
	}
	return out, nil
}

// inboxVersion reads workflow.inbox_version of every inbox, which moves
// whenever a run makes an audited transition or finishes; an inbox that
// cannot be read counts as "?" (so its return is a change); "" when none
// can be read.
func (s *Server) inboxVersion(ctx context.Context) string {
	var mu sync.Mutex
	parts := map[string]string{}
	problems, err := s.each(ctx, func(ctx context.Context, src *source) error {
		var v string
		if err := src.db.QueryRow(ctx, "select workflow.inbox_version()").Scan(&v); err != nil {
			return fmt.Errorf("the version of inbox %s: %w", src.name, err)
		}
		mu.Lock()
		parts[src.name] = v
		mu.Unlock()
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("Console could not read the inbox's version", "error", err)
		}
		return ""
	}
	for _, p := range problems {
		parts[p.Name] = "?"
	}
	names := make([]string, 0, len(parts))
	for name := range parts {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		b.WriteString(name + "=" + parts[name] + ";")
	}
	return b.String()
}
