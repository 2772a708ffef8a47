package console

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultAuthTTL is how long a token's review and its holder's permissions
// are trusted before they are asked again: a revoked token stops working at
// most this long after the API server stops accepting it.
const DefaultAuthTTL = 30 * time.Second

// maxAuthEntries bounds each of the gate's caches.
const maxAuthEntries = 20000

// reviewConcurrency bounds the access reviews one page waits for at once.
const reviewConcurrency = 8

// access is what one viewer may read.
type access struct {
	// all is the inbox-wide permission: every namespace's runs and the runs
	// with no Kubernetes source.
	all bool
	// namespaces are the namespaces whose runs the viewer may read.
	namespaces map[string]bool
	// who and key are the viewer as the API server verified it (who.Name
	// names the viewer) and the hash of its token, for the reviews of its
	// actions (zero when the console is unauthenticated).
	who User
	key [32]byte
	// csrf is what the console's forms carry for this viewer (csrfOf);
	// byHeader says the token came in an Authorization header, which no
	// other site's page can make a browser send.
	csrf     string
	byHeader bool
}

// everything is the access of an unauthenticated console.
var everything = access{all: true}

// may reports whether the viewer may read a run of namespace ns ("" for a
// run with no Kubernetes source).
func (a access) may(ns string) bool { return a.all || (ns != "" && a.namespaces[ns]) }

// list returns the readable namespaces, sorted.
func (a access) list() []string {
	out := make([]string, 0, len(a.namespaces))
	for ns := range a.namespaces {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

type userEntry struct {
	user User
	at   time.Time
}

type decisionKey struct {
	token              [32]byte
	verb, resource, ns string
}

type decisionEntry struct {
	allowed bool
	at      time.Time
}

// gate authenticates tokens and authorizes their holders, remembering each
// answer for ttl.
type gate struct {
	rev Reviewer
	ttl time.Duration

	mu        sync.Mutex
	users     map[[32]byte]userEntry
	decisions map[decisionKey]decisionEntry
}

func newGate(rev Reviewer, ttl time.Duration) *gate {
	if ttl <= 0 {
		ttl = DefaultAuthTTL
	}
	return &gate{rev: rev, ttl: ttl, users: map[[32]byte]userEntry{}, decisions: map[decisionKey]decisionEntry{}}
}

// user returns who holds token; an error wrapping ErrUnauthenticated when
// no one valid does. Only answers are remembered, not failures to ask.
func (g *gate) user(ctx context.Context, key [32]byte, token string) (User, error) {
	g.mu.Lock()
	e, ok := g.users[key]
	g.mu.Unlock()
	if ok && time.Since(e.at) < g.ttl {
		if e.user.Name == "" {
			return User{}, ErrUnauthenticated
		}
		return e.user, nil
	}
	u, err := g.rev.Authenticate(ctx, token)
	if err != nil && !errors.Is(err, ErrUnauthenticated) {
		return User{}, err
	}
	g.mu.Lock()
	prune(g.users, g.ttl, func(e userEntry) time.Time { return e.at })
	g.users[key] = userEntry{user: u, at: time.Now()}
	g.mu.Unlock()
	if err != nil || u.Name == "" {
		return User{}, ErrUnauthenticated
	}
	return u, nil
}

// allowed is Reviewer.Allowed, remembered.
func (g *gate) allowed(ctx context.Context, key [32]byte, u User, verb, resource, ns string) (bool, error) {
	k := decisionKey{token: key, verb: verb, resource: resource, ns: ns}
	g.mu.Lock()
	e, ok := g.decisions[k]
	g.mu.Unlock()
	if ok && time.Since(e.at) < g.ttl {
		return e.allowed, nil
	}
	allowed, err := g.rev.Allowed(ctx, u, verb, resource, ns)
	if err != nil {
		return false, err
	}
	g.mu.Lock()
	prune(g.decisions, g.ttl, func(e decisionEntry) time.Time { return e.at })
	g.decisions[k] = decisionEntry{allowed: allowed, at: time.Now()}
	g.mu.Unlock()
	return allowed, nil
}

// prune drops expired entries of a full cache, and everything when that is
// not enough: the caches stay bounded whatever tokens are sent.
func prune[K comparable, V any](m map[K]V, ttl time.Duration, at func(V) time.Time) {
	if len(m) < maxAuthEntries {
		return
	}
	for k, v := range m {
		if time.Since(at(v)) >= ttl {
			delete(m, k)
		}
	}
	if len(m) >= maxAuthEntries {
		clear(m)
	}
}

// access returns what the holder of token may read among namespaces: the
// inbox-wide permission (get on the cluster-scoped "inbox"), or the
// namespaces where it may list and get WorkflowRuns.
func (g *gate) access(ctx context.Context, token string, namespaces []string) (access, error) {
	key := sha256.Sum256([]byte(token))
	u, err := g.user(ctx, key, token)
	if err != nil {
		return access{}, err
	}
	a := access{namespaces: map[string]bool{}, who: u, key: key}
	all, err := g.allowed(ctx, key, u, "get", inboxResource, "")
	if err != nil {
		return access{}, err
	}
	if all {
		a.all = true
		return a, nil
	}
	type answer struct {
		ns  string
		ok  bool
		err error
	}
	answers := make(chan answer, len(namespaces))
	slots := make(chan struct{}, reviewConcurrency)
	for _, ns := range namespaces {
		go func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			ok, err := g.allowed(ctx, key, u, "list", runsResource, ns)
			if err == nil && ok {
				ok, err = g.allowed(ctx, key, u, "get", runsResource, ns)
			}
			answers <- answer{ns: ns, ok: ok, err: err}
		}()
	}
	var firstErr error
	for range namespaces {
		ans := <-answers
		if ans.err != nil && firstErr == nil {
			firstErr = ans.err
		}
		if ans.ok {
			a.namespaces[ans.ns] = true
		}
	}
	if firstErr != nil {
		return access{}, firstErr
	}
	return a, nil
}

// namespaceCache remembers the namespaces that have runs, briefly.
type namespaceCache struct {
	mu   sync.Mutex
	at   time.Time
	list []string
}

// namespaceFresh is how long the list of namespaces with runs is reused.
const namespaceFresh = 2 * time.Second

// knownNamespaces returns the namespaces that have runs (one index probe
// each: a skip scan of idx_workflow_run_namespace_created) and those of the
// worker pools' registries.
func (s *Server) knownNamespaces(ctx context.Context) ([]string, error) {
	c := &s.namespaces
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < namespaceFresh {
		return c.list, nil
	}
	var mu sync.Mutex
	var list []string
	seen := map[string]bool{}
	problems, err := s.each(ctx, func(ctx context.Context, src *source) error {
		rows, err := src.db.Query(ctx, `select n from workflow.run_namespaces() n`)
		if err != nil {
			return fmt.Errorf("namespaces with runs in inbox %s: %w", src.name, err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("namespaces with runs in inbox %s: %w", src.name, err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, ns := range names {
			if !seen[ns] {
				seen[ns] = true
				list = append(list, ns)
			}
		}
		return nil
	})
	if err != nil && c.at.IsZero() && !s.inboxes.several() {
		return nil, err
	}
	if err != nil || len(problems) > 0 {
		// An inbox could not be read: its namespaces are those it had
		// (a viewer's access is asked for them still), so that one
		// inbox's outage does not empty, or refuse, the pages of the
		// viewers of its namespaces.
		if err != nil {
			s.log.Warn("Console could not list the namespaces with runs of every inbox; it keeps those it knew", "error", err)
		}
		for _, ns := range c.list {
			if !seen[ns] {
				seen[ns] = true
				list = append(list, ns)
			}
		}
	}
	if s.pools != nil {
		if pools, err := s.pools.WorkerPools(ctx); err == nil {
			for _, p := range pools {
				if !seen[p.Namespace] {
					seen[p.Namespace] = true
					list = append(list, p.Namespace)
				}
			}
		}
	}
	sort.Strings(list)
	c.at, c.list = time.Now(), list
	return list, nil
}
