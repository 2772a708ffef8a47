package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/logapi"
)

// logAPIRunnable serves the log API on every replica, leader or not: it
// only reads.
type logAPIRunnable struct {
	server  *logapi.Server
	addr    string
	certDir string
}

// Start serves the log API until ctx ends.
func (r logAPIRunnable) Start(ctx context.Context) error {
	return r.server.Serve(ctx, r.addr, r.certDir)
}

// NeedLeaderElection is false: standbys serve the log API too.
func (logAPIRunnable) NeedLeaderElection() bool { return false }

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// newLogAPI builds the log API server: it reads WorkflowRuns through the
// API reader (no cache of every run on a standby) and each namespace's
// inbox through logInboxes. close closes the pools it opened.
func newLogAPI(o options, mgr ctrl.Manager, routed *controller.InboxSet) (logAPIRunnable, func(), error) {
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return logAPIRunnable{}, nil, fmt.Errorf("log API: Kubernetes client: %w", err)
	}
	log := slog.New(logr.ToSlogHandler(ctrl.Log.WithName("log-api")))
	inboxes := &logInboxes{defURL: o.databaseURL, set: routed, list: mgr.GetClient(), secrets: mgr.GetAPIReader(),
		own: map[string]*ownInbox{}}
	srv, err := logapi.New(logapi.Config{Kube: cs, Runs: mgr.GetAPIReader(), Inboxes: inboxes, Logger: log})
	if err != nil {
		return logAPIRunnable{}, nil, err
	}
	return logAPIRunnable{server: srv, addr: o.logAPIAddr, certDir: o.logAPICertDir}, inboxes.close, nil
}

// logInboxes finds the inbox of a namespace for the log API: a small pool
// of its own (two connections) to each inbox it reads, the default inbox's
// from the manager's URL, a WorkflowInbox's from its Secret, so that log
// reads never take the connections the controllers and the leader's loops
// use (and a standby, which connects to no WorkflowInbox, reads them too).
type logInboxes struct {
	defURL string
	// set routes namespaces; nil when only the default inbox is served.
	set *controller.InboxSet
	// list reads WorkflowInboxes (the cache), secrets reads Secrets.
	list, secrets client.Reader

	mu  sync.Mutex
	own map[string]*ownInbox
}

// ownInbox is a pool the log API opened to a WorkflowInbox's database.
type ownInbox struct {
	source [32]byte // hash of the URL
	pool   *pgxpool.Pool
	eng    *engine.Engine
}

// InboxFor implements logapi.Inboxes.
func (l *logInboxes) InboxFor(ctx context.Context, namespace string) (logapi.Inbox, error) {
	if l.set == nil {
		return l.open(ctx, workflowv1alpha1.DefaultInboxName, l.defURL)
	}
	name, err := l.set.Placed(ctx, namespace)
	if err != nil {
		return nil, err
	}
	if name == workflowv1alpha1.DefaultInboxName {
		return l.open(ctx, name, l.defURL)
	}
	var in workflowv1alpha1.WorkflowInbox
	if err := l.list.Get(ctx, client.ObjectKey{Name: name}, &in); err != nil {
		return nil, fmt.Errorf("read WorkflowInbox %s: %w", name, err)
	}
	url, err := controller.InboxSecretURL(ctx, l.secrets, &in)
	if err != nil {
		return nil, fmt.Errorf("inbox %s: %w", name, err)
	}
	return l.open(ctx, name, url)
}

// open returns the pool of the named inbox at url, opening it (and closing
// one opened with another URL) when needed.
func (l *logInboxes) open(ctx context.Context, name, url string) (*engine.Engine, error) {
	sum := sha256.Sum256([]byte(url))
	l.mu.Lock()
	defer l.mu.Unlock()
	if o := l.own[name]; o != nil {
		if o.source == sum {
			return o.eng, nil
		}
		// Closed apart: Close waits for the reads under way, which must
		// not hold up the other inboxes' reads.
		go o.pool.Close()
		delete(l.own, name)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parser's message may quote the URL and its password.
		return nil, fmt.Errorf("inbox %s: the Secret's URL does not parse as a Postgres URL", name)
	}
	cfg.MaxConns = 2
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > 5*time.Second {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(context.WithoutCancel(ctx), cfg)
	if err != nil {
		return nil, fmt.Errorf("inbox %s: open the database: %w", name, err)
	}
	eng, err := engine.New(pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	l.own[name] = &ownInbox{source: sum, pool: pool, eng: eng}
	return eng, nil
}

// close closes the pools the log API opened.
func (l *logInboxes) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, o := range l.own {
		o.pool.Close()
		delete(l.own, name)
	}
}
