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
func newConsole(ctx context.Context, o options, cfg *rest.Config, pools console.PoolLister, log *slog.Logger) (*console.Server, func(), error) {
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
	c := console.Config{DB: pool, Pools: pools, Logger: log, AllowedHosts: hosts}
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
	}
	srv, err := console.New(c)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return srv, pool.Close, nil
}
