// Command manager is the simple-workflow operator: it mirrors WorkflowRuns
// into the Postgres inbox and writes their progress back, mirrors
// WorkflowRegistries into the registry table, and (as leader) reclaims
// expired leases and applies retention.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/console"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
}

// options are the manager's settings; every flag has an environment fallback.
type options struct {
	databaseURL          string
	databaseURLFile      string
	metricsAddr          string
	probeAddr            string
	leaderElect          bool
	leaderElectNamespace string
	leaderElection       leaderElectionTiming
	kubeconfig           string
	printVersion         bool
	kubeAPIQPS           float64
	kubeAPIBurst         int
	skipMigrations       bool
	createDatabaseRoles  bool
	retention            time.Duration
	resyncPeriod         time.Duration
	maxConcurrent        int
	autoscaleInterval    time.Duration
	deletionGracePeriod  time.Duration
	consoleAddr          string
	consoleDatabaseURL   string
	consoleDatabaseRole  string
	consoleAllowedHosts  string
	consoleAuth          string
	logAPIAddr           string
	logAPICertDir        string
	zap                  zap.Options
}

// lookupEnv reads an environment variable; tests pass their own.
type lookupEnv func(string) (string, bool)

func parseFlags(args []string, lookup lookupEnv) (options, error) {
	env := func(key, def string) string {
		if v, ok := lookup(key); ok {
			return v
		}
		return def
	}
	// A malformed environment value is an error, not silently the default;
	// an empty one counts as unset.
	var envErr error
	envParse := func(key string, parse func(string) error) {
		if v, ok := lookup(key); ok && v != "" && envErr == nil {
			if err := parse(v); err != nil {
				envErr = fmt.Errorf("environment variable %s=%q: %w", key, v, err)
			}
		}
	}
	envBool := func(key string, def bool) bool {
		envParse(key, func(v string) (err error) { def, err = strconv.ParseBool(v); return err })
		return def
	}
	envDuration := func(key string, def time.Duration) time.Duration {
		envParse(key, func(v string) (err error) { def, err = time.ParseDuration(v); return err })
		return def
	}
	envInt := func(key string, def int) int {
		envParse(key, func(v string) (err error) { def, err = strconv.Atoi(v); return err })
		return def
	}
	envFloat := func(key string, def float64) float64 {
		envParse(key, func(v string) (err error) { def, err = strconv.ParseFloat(v, 64); return err })
		return def
	}
	var o options
	flag := flag.NewFlagSet("manager", flag.ContinueOnError)
	// No default shown for the URL: it may hold a password (--help prints defaults).
	flag.StringVar(&o.databaseURL, "database-url", "", "Postgres URL of the inbox (env DATABASE_URL)")
	flag.StringVar(&o.databaseURLFile, "database-url-file", env("DATABASE_URL_FILE", ""), "file holding the Postgres URL, e.g. a mounted Secret (env DATABASE_URL_FILE)")
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", env("METRICS_BIND_ADDRESS", ":8080"), "metrics endpoint address, 0 disables (env METRICS_BIND_ADDRESS)")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", env("HEALTH_PROBE_BIND_ADDRESS", ":8081"), "health probe address (env HEALTH_PROBE_BIND_ADDRESS)")
	flag.BoolVar(&o.leaderElect, "leader-elect", envBool("LEADER_ELECT", false), "elect a leader so only one manager is active (env LEADER_ELECT)")
	flag.StringVar(&o.leaderElectNamespace, "leader-election-namespace", env("LEADER_ELECTION_NAMESPACE", ""), "namespace of the leader election Lease (env LEADER_ELECTION_NAMESPACE)")
	le := defaultLeaderElectionTiming()
	flag.DurationVar(&o.leaderElection.leaseDuration, "leader-election-lease-duration", envDuration("LEADER_ELECTION_LEASE_DURATION", le.leaseDuration), "how long a standby waits, from the last renewal it saw, before taking over from a leader that stopped renewing; whole seconds (env LEADER_ELECTION_LEASE_DURATION)")
	flag.DurationVar(&o.leaderElection.renewDeadline, "leader-election-renew-deadline", envDuration("LEADER_ELECTION_RENEW_DEADLINE", le.renewDeadline), "how long the leader keeps trying to renew before it stops leading and exits (env LEADER_ELECTION_RENEW_DEADLINE)")
	flag.DurationVar(&o.leaderElection.retryPeriod, "leader-election-retry-period", envDuration("LEADER_ELECTION_RETRY_PERIOD", le.retryPeriod), "how often the leader renews and a standby looks at the lease (env LEADER_ELECTION_RETRY_PERIOD)")
	flag.StringVar(&o.kubeconfig, "kubeconfig", env("KUBECONFIG", ""), "kubeconfig file of the cluster; in a Pod the in-cluster config is used when unset (env KUBECONFIG)")
	flag.Float64Var(&o.kubeAPIQPS, "kube-api-qps", envFloat("KUBE_API_QPS", 500), "Kubernetes API queries per second (env KUBE_API_QPS)")
	flag.IntVar(&o.kubeAPIBurst, "kube-api-burst", envInt("KUBE_API_BURST", 1000), "Kubernetes API burst (env KUBE_API_BURST)")
	flag.BoolVar(&o.skipMigrations, "skip-migrations", envBool("SKIP_MIGRATIONS", false), "do not apply schema migrations at start-up (env SKIP_MIGRATIONS)")
	flag.BoolVar(&o.createDatabaseRoles, "create-database-roles", envBool("CREATE_DATABASE_ROLES", false), "create the database roles workflow_worker, workflow_producer and workflow_reader when missing and grant them what they need, at start-up (env CREATE_DATABASE_ROLES)")
	flag.DurationVar(&o.retention, "retention", envDuration("RETENTION", 7*24*time.Hour), "delete finished inbox runs (and their events) older than this; 0 keeps them (env RETENTION)")
	flag.DurationVar(&o.resyncPeriod, "resync-period", envDuration("RESYNC_PERIOD", controller.DefaultResyncPeriod), "re-read unfinished runs this often without a notification (env RESYNC_PERIOD)")
	flag.IntVar(&o.maxConcurrent, "max-concurrent-reconciles", envInt("MAX_CONCURRENT_RECONCILES", 16), "WorkflowRun reconciles in parallel (env MAX_CONCURRENT_RECONCILES)")
	flag.DurationVar(&o.deletionGracePeriod, "deletion-grace-period", envDuration("DELETION_GRACE_PERIOD", controller.DefaultDeletionGracePeriod), "how long the deletion of a WorkflowRun or WorkflowRegistry waits for an unreachable database before its finalizer is removed anyway (env DELETION_GRACE_PERIOD)")
	flag.DurationVar(&o.autoscaleInterval, "autoscale-interval", envDuration("AUTOSCALE_INTERVAL", controller.DefaultAutoscaleInterval), "evaluate worker pools this often, besides on new runs (env AUTOSCALE_INTERVAL)")
	flag.StringVar(&o.consoleAddr, "console-bind-address", env("CONSOLE_BIND_ADDRESS", ""), "serve the read-only web console on this address, e.g. :8082; off when empty (env CONSOLE_BIND_ADDRESS)")
	flag.StringVar(&o.consoleDatabaseURL, "console-database-url", env("CONSOLE_DATABASE_URL", ""), "Postgres URL the console reads with; the manager's when empty (env CONSOLE_DATABASE_URL)")
	flag.StringVar(&o.consoleDatabaseRole, "console-database-role", env("CONSOLE_DATABASE_ROLE", console.DefaultRole), "database role the console reads as (SET ROLE); empty reads as the login user, still in read-only transactions (env CONSOLE_DATABASE_ROLE)")
	flag.StringVar(&o.consoleAuth, "console-auth", env("CONSOLE_AUTH", consoleAuthKubernetes), "who may read the console: kubernetes (a Kubernetes bearer token, checked with TokenReview; each namespace authorized with SubjectAccessReview) or none (everyone reads everything: only on a trusted network) (env CONSOLE_AUTH)")
	flag.StringVar(&o.consoleAllowedHosts, "console-allowed-hosts", env("CONSOLE_ALLOWED_HOSTS", ""), "comma-separated host names the console answers to besides IP addresses, localhost and *.svc names, e.g. an Ingress's (env CONSOLE_ALLOWED_HOSTS)")
	flag.StringVar(&o.logAPIAddr, "log-api-bind-address", env("LOG_API_BIND_ADDRESS", ""), "serve the log API (logs.simpleworkflow.dev, an APIService behind kube-apiserver, for kubectl workflow logs) over TLS on this address, e.g. :8443; off when empty (env LOG_API_BIND_ADDRESS)")
	flag.StringVar(&o.logAPICertDir, "log-api-cert-dir", env("LOG_API_CERT_DIR", ""), "directory holding the log API's serving certificate and key, tls.crt and tls.key, read again when they change (env LOG_API_CERT_DIR)")
	flag.BoolVar(&o.printVersion, "version", false, "print the version and exit")
	o.zap.BindFlags(flag)
	if err := flag.Parse(args); err != nil {
		return o, err
	}
	if o.printVersion {
		return o, nil
	}
	if envErr != nil {
		return o, envErr
	}

	if o.databaseURL == "" {
		o.databaseURL = env("DATABASE_URL", "")
	}
	if o.databaseURL == "" && o.databaseURLFile != "" {
		b, err := os.ReadFile(o.databaseURLFile)
		if err != nil {
			return o, fmt.Errorf("read --database-url-file: %w", err)
		}
		o.databaseURL = strings.TrimSpace(string(b))
	}
	if o.databaseURL == "" {
		return o, errors.New("--database-url, --database-url-file or DATABASE_URL is required")
	}
	if o.kubeAPIQPS <= 0 || o.kubeAPIBurst <= 0 {
		return o, errors.New("--kube-api-qps and --kube-api-burst must be positive")
	}
	if o.deletionGracePeriod <= 0 {
		return o, errors.New("--deletion-grace-period must be positive")
	}
	if err := o.leaderElection.validate(); err != nil {
		return o, err
	}
	if o.logAPIAddr != "" && o.logAPICertDir == "" {
		return o, errors.New("--log-api-bind-address needs --log-api-cert-dir (its serving certificate)")
	}
	if o.consoleAuth != consoleAuthKubernetes && o.consoleAuth != consoleAuthNone {
		return o, fmt.Errorf("--console-auth must be %s or %s, got %q", consoleAuthKubernetes, consoleAuthNone, o.consoleAuth)
	}
	return o, nil
}

func run() error {
	o, err := parseFlags(os.Args[1:], os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if o.printVersion {
		fmt.Printf("manager %s (revision %s)\n", version, revision)
		return nil
	}
	ctx := ctrl.SetupSignalHandler()
	ctrl.SetLogger(newQuietShutdownLogger(zap.New(zap.UseFlagOptions(&o.zap)), func() bool { return ctx.Err() != nil }))
	log := ctrl.Log.WithName("setup")

	poolConfig, err := pgxpool.ParseConfig(o.databaseURL)
	if err != nil {
		return errors.New("database: the URL does not parse as a Postgres URL")
	}
	if poolConfig.ConnConfig.ConnectTimeout == 0 {
		// A database that does not answer fails a connection attempt
		// in seconds, not at the kernel's TCP timeout.
		poolConfig.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	if err := pingWithRetry(ctx, pool); err != nil {
		return err
	}
	if !o.skipMigrations {
		applied, err := engine.Migrate(ctx, pool)
		if err != nil {
			return err
		}
		log.Info("Schema migrated", "applied", applied)
	}
	if o.createDatabaseRoles {
		if err := engine.CreateRoles(ctx, pool); err != nil {
			return err
		}
		log.Info("Database roles granted", "roles", []string{engine.RoleWorker, engine.RoleProducer, engine.RoleReader})
	}
	eng, err := engine.New(pool)
	if err != nil {
		return err
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(workflowv1alpha1.AddToScheme(scheme))
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(o.kubeAPIQPS), o.kubeAPIBurst

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Metrics: metricsserver.Options{
			BindAddress: o.metricsAddr,
			TLSOpts:     []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
		},
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "simple-workflow-manager.simpleworkflow.dev",
		LeaderElectionNamespace: o.leaderElectNamespace,
		LeaseDuration:           &o.leaderElection.leaseDuration,
		RenewDeadline:           &o.leaderElection.renewDeadline,
		RetryPeriod:             &o.leaderElection.retryPeriod,
		// Step down at once on SIGTERM, so that a standby leads without
		// waiting for the lease to expire; the process exits right after.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	m := controller.NewMetrics(metrics.Registry)
	watcher := controller.NewInboxWatcher(eng, ctrl.Log.WithName("inbox-watch"))
	if err := mgr.Add(watcher); err != nil {
		return err
	}
	schedules := &controller.WorkflowScheduleReconciler{
		Client: mgr.GetClient(), Inbox: eng, Recorder: mgr.GetEventRecorder("workflowschedule-controller"),
		DeletionGracePeriod: o.deletionGracePeriod,
	}
	// inboxes holds every inbox; routed is inboxes when WorkflowInboxes
	// are served, nil when only the default inbox is.
	var inboxes, routed *controller.InboxSet
	servedBy := func(name string) func(context.Context, string) bool {
		return func(ctx context.Context, ns string) bool {
			if routed == nil {
				return name == workflowv1alpha1.DefaultInboxName
			}
			_, at, err := routed.For(ctx, ns)
			return err == nil && at == name
		}
	}
	downOf := func(name string) func() bool {
		return func() bool { up, _ := inboxes.Up(name); return !up }
	}
	autoscaler := func(name string, e *engine.Engine) *controller.Autoscaler {
		return &controller.Autoscaler{
			Client: mgr.GetClient(), Engine: e, Recorder: mgr.GetEventRecorder("worker-autoscaler"),
			Log: ctrl.Log.WithName("autoscaler").WithValues("inbox", name), Metrics: m, Interval: o.autoscaleInterval,
			Serves: servedBy(name), Down: downOf(name),
		}
	}
	maintenance := func(name string, e *engine.Engine) *controller.Maintenance {
		return &controller.Maintenance{
			Engine: e, Inbox: name, Log: ctrl.Log.WithName("maintenance").WithValues("inbox", name), Metrics: m,
			Retention: o.retention, Schedules: schedules, Down: downOf(name),
		}
	}
	// The loops of a WorkflowInbox's database, run while it is connected.
	serve := func(ctx context.Context, name string, e *engine.Engine) {
		var wg sync.WaitGroup
		wg.Go(func() { _ = watcher.For(e, ctrl.Log.WithName("inbox-watch").WithValues("inbox", name)).Start(ctx) })
		wg.Go(func() { _ = maintenance(name, e).Start(ctx) })
		wg.Go(func() { _ = autoscaler(name, e).Start(ctx) })
		wg.Wait()
	}
	inboxes = controller.NewInboxSet(mgr.GetClient(), eng, serve, ctrl.Log.WithName("inboxes"), m)
	if id, err := engine.DatabaseIdentity(ctx, pool); err != nil {
		log.Info("Could not read the default inbox's database identity; it is read when a WorkflowInbox connects", "error", err.Error())
	} else {
		inboxes.SetDefaultIdentity(id)
	}
	defer inboxes.Close()
	if err := mgr.Add(inboxes); err != nil {
		return err
	}
	waker := controller.NewNamespaceWaker(mgr.GetClient(), watcher, ctrl.Log.WithName("inboxes"))
	// A cluster upgraded without the WorkflowInbox CRD (helm does not
	// upgrade CRDs) keeps working with the default inbox alone.
	routed = inboxes
	inboxKind := workflowv1alpha1.GroupVersion.WithKind("WorkflowInbox").GroupKind()
	if err := kindServed(ctx, mgr.GetRESTMapper(), inboxKind, workflowv1alpha1.GroupVersion.Version); apimeta.IsNoMatchError(err) {
		log.Info("WorkflowInbox is not served by the API server (its CRD is not installed): only the default inbox is used; install the CRD and restart the manager to serve more")
		routed = nil
	} else if err != nil {
		return fmt.Errorf("look up the WorkflowInbox kind: %w", err)
	}
	schedules.Inboxes, schedules.Woken = routed, waker.Schedules
	if routed == nil {
		// no WorkflowInbox controller
	} else if err := (&controller.WorkflowInboxReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Set: inboxes,
		Recorder: mgr.GetEventRecorder("workflowinbox-controller"), Wake: waker.Wake,
		Migrate: func(ctx context.Context, p *pgxpool.Pool) (int, error) {
			if !o.skipMigrations {
				if _, err := engine.Migrate(ctx, p); err != nil {
					return 0, err
				}
			}
			if o.createDatabaseRoles {
				if err := engine.CreateRoles(ctx, p); err != nil {
					return 0, err
				}
			}
			return engine.InstalledSchemaVersion(ctx, p)
		},
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up WorkflowInbox controller: %w", err)
	}
	if err := (&controller.WorkflowRunReconciler{
		Client: mgr.GetClient(), Inbox: eng, Inboxes: routed, Recorder: mgr.GetEventRecorder("workflowrun-controller"),
		Changes: watcher.Changes(), Followers: watcher.Followers(), ResyncPeriod: o.resyncPeriod, Metrics: m, MaxConcurrentReconciles: o.maxConcurrent,
		DeletionGracePeriod: o.deletionGracePeriod,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up WorkflowRun controller: %w", err)
	}
	if err := (&controller.WorkflowRegistryReconciler{
		Client: mgr.GetClient(), Inbox: eng, Inboxes: routed, Woken: waker.Registries,
		Recorder:            mgr.GetEventRecorder("workflowregistry-controller"),
		DeletionGracePeriod: o.deletionGracePeriod,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up WorkflowRegistry controller: %w", err)
	}
	if err := schedules.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up WorkflowSchedule controller: %w", err)
	}
	if err := mgr.Add(maintenance(workflowv1alpha1.DefaultInboxName, eng)); err != nil {
		return err
	}
	if err := mgr.Add(autoscaler(workflowv1alpha1.DefaultInboxName, eng)); err != nil {
		return err
	}
	if o.consoleAddr != "" {
		clog := slog.New(logr.ToSlogHandler(ctrl.Log.WithName("console")))
		var listed console.InboxLister
		if routed != nil {
			listed = workflowInboxes{list: mgr.GetClient(), secrets: mgr.GetAPIReader(), log: clog}
		}
		srv, closeConsole, err := newConsole(ctx, o, mgr.GetConfig(), registryPools{c: mgr.GetClient()}, listed,
			consoleActor{def: eng, inboxes: routed}, clog)
		if err != nil {
			return err
		}
		defer closeConsole()
		if err := mgr.Add(consoleRunnable{server: srv, addr: o.consoleAddr}); err != nil {
			return err
		}
	}
	if o.logAPIAddr != "" {
		la, closeLogAPI, err := newLogAPI(o, mgr, routed)
		if err != nil {
			return err
		}
		defer closeLogAPI()
		if err := mgr.Add(la); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("postgres", func(req *http.Request) error {
		pctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
		defer cancel()
		if err := pool.Ping(pctx); err != nil {
			return fmt.Errorf("postgres unreachable: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	log.Info("Starting manager", "version", version, "revision", revision)
	return mgr.Start(ctx)
}

// kindServed asks the API server whether it serves a kind, for up to a
// minute while it does not answer (a restarting API server is not a
// missing CRD): nil when served, a NoMatch error when not.
func kindServed(ctx context.Context, mapper apimeta.RESTMapper, gk schema.GroupKind, version string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := mapper.RESTMapping(gk, version)
		if err == nil || apimeta.IsNoMatchError(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Second)
	}
}

// pingWithRetry waits up to a minute for Postgres to answer.
func pingWithRetry(ctx context.Context, pool *pgxpool.Pool) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := pool.Ping(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("database unreachable: %w", err)
		}
		time.Sleep(time.Second)
	}
}

// restConfig loads the Kubernetes client configuration: the kubeconfig file
// when one is named, else the in-cluster configuration, else
// ~/.kube/config.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("load Kubernetes client configuration: %w", err)
	}
	return cfg, nil
}
