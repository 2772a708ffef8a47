package console

import (
	"context"
	"fmt"
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
	// maxSubscribers bounds the open streams; more are refused (503).
	maxSubscribers = 256
)

// liveChannels are the notifications after which something shown may have
// changed.
var liveChannels = []string{
	"workflow_run_status", engine.ChannelRunChanged, engine.ChannelRunCreated, engine.ChannelRunCancelled,
}

// subscriber is one open event stream: of one run's page (run set), or of a
// page of many runs.
type subscriber struct {
	run     string
	version string
	ch      chan struct{}
}

// hub tells the open streams when what their page shows changed.
type hub struct {
	mu       sync.Mutex
	subs     map[*subscriber]struct{}
	kick     chan struct{}
	lastList time.Time
	// listLater is set while a look is scheduled for the pages of many runs.
	listLater bool
}

func newHub() *hub {
	return &hub{subs: map[*subscriber]struct{}{}, kick: make(chan struct{}, 1)}
}

// subscribe adds a stream; nil when there are too many.
func (h *hub) subscribe(run, version string) *subscriber {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) >= maxSubscribers {
		return nil
	}
	s := &subscriber{run: run, version: version, ch: make(chan struct{}, 1)}
	h.subs[s] = struct{}{}
	h.poke()
	return s
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

// run listens for the inbox's notifications and looks at what the open
// streams show after each burst of them, and once more shortly after, until
// ctx ends.
func (s *Server) run(ctx context.Context) error {
	go func() {
		_ = s.engine.Listen(ctx, engine.ListenConfig{
			Channels:  liveChannels,
			OnNotify:  func(engine.Notification) { s.hub.poke() },
			OnConnect: s.hub.poke,
			Logger:    s.log,
		})
	}()
	var again <-chan time.Time
	for {
		select {
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
		if err := s.look(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("Console could not look for changes", "error", err)
			again = time.After(followUp)
		}
	}
}

// look tells each stream whose page changed: a run's page when the run's
// version moved, a page of many runs at most every listInterval.
func (s *Server) look(ctx context.Context) error {
	h := s.hub
	h.mu.Lock()
	var runs []string
	seen := map[string]bool{}
	listPages := false
	for sub := range h.subs {
		if sub.run == "" {
			listPages = true
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
				if sub.run == "" {
					notify(sub)
				}
			}
		}
	}
	h.mu.Unlock()
	if len(runs) == 0 {
		return nil
	}
	versions, err := runVersions(ctx, s, runs)
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
// would show something new: its status, attempt, update time, and its
// latest audit event, the number of its journal entries, and the latest
// change of its children (a DAG's steps, durable child runs).
func runVersions(ctx context.Context, s *Server, ids []string) (map[string]string, error) {
	rows, err := s.db.Query(ctx, `
select r.id::text,
       r.status || '/' || r.attempt || '/' || extract(epoch from r.updated_at)::text || '/' ||
       coalesce((select max(e.id) from workflow.workflow_event e where e.workflow_id = r.id), 0) || '/' ||
       coalesce((select count(*) from workflow.workflow_step st where st.run_id = r.id), 0) || '/' ||
       coalesce((select count(*) || '@' || extract(epoch from max(c.updated_at))::text
                 from workflow.workflow_run c where c.parent_id = r.id), '')
from workflow.workflow_run r
where r.id = any($1::uuid[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("run versions: %w", err)
	}
	out := make(map[string]string, len(ids))
	var id, v string
	if _, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error {
		out[id] = v
		return nil
	}); err != nil {
		return nil, fmt.Errorf("run versions: %w", err)
	}
	return out, nil
}
