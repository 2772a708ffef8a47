package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/console"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// registryPools lists the worker pools the WorkflowRegistry objects declare,
// for the console's overview.
type registryPools struct{ c client.Reader }

// WorkerPools implements console.PoolLister.
func (p registryPools) WorkerPools(ctx context.Context) ([]console.WorkerPool, error) {
	var list workflowv1alpha1.WorkflowRegistryList
	if err := p.c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list WorkflowRegistries: %w", err)
	}
	var out []console.WorkerPool
	for _, r := range list.Items {
		for _, w := range r.Spec.Workers {
			out = append(out, console.WorkerPool{
				Namespace: r.Namespace, Registry: r.Name, Target: w.ScaleTargetRef.Name,
				Runtime: string(w.Runtime), Prefixes: w.TypePrefixes,
			})
		}
	}
	return out, nil
}

// consoleRunnable serves the console on every replica, leader or not: it
// only reads.
type consoleRunnable struct {
	server *console.Server
	addr   string
}

// Start serves the console until ctx ends.
func (r consoleRunnable) Start(ctx context.Context) error { return r.server.Serve(ctx, r.addr) }

// NeedLeaderElection is false: standbys serve the console too.
func (consoleRunnable) NeedLeaderElection() bool { return false }

// The values of --console-auth.
const (
	consoleAuthKubernetes = "kubernetes"
	consoleAuthNone       = "none"
)

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// newConsole opens the console's read-only pool and its server; with
// Kubernetes authentication it checks tokens and permissions through cfg.
// The console reads the default inbox through that pool and each inbox
// inboxes lists (nil when WorkflowInboxes are not served) through its own.
func newConsole(ctx context.Context, o options, cfg *rest.Config, pools console.PoolLister, inboxes console.InboxLister,
	actor console.Actor, log *slog.Logger) (*console.Server, func(), error) {
	url := o.consoleDatabaseURL
	if url == "" {
		url = o.databaseURL
	}
	pool, err := console.OpenReadPool(ctx, url, o.consoleDatabaseRole, log)
	if err != nil {
		return nil, nil, err
	}
	var hosts []string
	for _, h := range strings.Split(o.consoleAllowedHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	c := console.Config{DB: pool, Pools: pools, Inboxes: inboxes, Role: o.consoleDatabaseRole, Logger: log,
		AllowedHosts: hosts}
	if o.consoleAuth == consoleAuthNone {
		c.Unauthenticated = true
		log.Warn("THE CONSOLE IS UNAUTHENTICATED (--console-auth=none): whoever reaches its port reads every namespace's runs, payloads, results and errors; use it only on a trusted network",
			"address", o.consoleAddr)
	} else {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("console: Kubernetes client: %w", err)
		}
		c.Auth = console.KubeReviewer{Client: cs}
		c.Actor = actor
	}
	srv, err := console.New(c)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return srv, pool.Close, nil
}

// consoleActor writes the console's actions with the manager's engines:
// the default inbox's, and those of the WorkflowInboxes this replica is
// connected to.
type consoleActor struct {
	def     *engine.Engine
	inboxes *controller.InboxSet // nil when WorkflowInboxes are not served
}

// Engine implements console.Actor.
func (a consoleActor) Engine(_ context.Context, inbox string) (*engine.Engine, error) {
	if inbox == console.DefaultInbox {
		return a.def, nil
	}
	if a.inboxes != nil {
		if e, ok := a.inboxes.Engine(inbox); ok {
			return e, nil
		}
	}
	return nil, fmt.Errorf("inbox %s is not connected on this manager replica (the leading manager connects the WorkflowInboxes)", inbox)
}

// workflowInboxes lists the WorkflowInboxes and the database URLs their
// Secrets hold, for the console.
type workflowInboxes struct {
	// list reads WorkflowInboxes (the manager's cache), secrets reads
	// Secrets (the API reader: Secrets are not cached).
	list, secrets client.Reader
	log           *slog.Logger
}

// Inboxes implements console.InboxLister. An inbox whose Secret cannot be
// read is listed without a URL (its WorkflowInbox's Ready condition says
// why): the console keeps reading it as before, or shows it as not read.
func (w workflowInboxes) Inboxes(ctx context.Context) ([]console.InboxURL, error) {
	var list workflowv1alpha1.WorkflowInboxList
	if err := w.list.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list WorkflowInboxes: %w", err)
	}
	out := make([]console.InboxURL, 0, len(list.Items))
	for i := range list.Items {
		in := &list.Items[i]
		url, err := controller.InboxSecretURL(ctx, w.secrets, in)
		if err != nil {
			w.log.Debug("Console could not read an inbox's Secret", "inbox", in.Name, "error", err)
		}
		out = append(out, console.InboxURL{Name: in.Name, URL: url, Err: err})
	}
	return out, nil
}
