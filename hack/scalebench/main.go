// Command scalebench measures the operator: N WorkflowRuns created at once
// against a real kube-apiserver (envtest, KUBEBUILDER_ASSETS) and a real
// Postgres (DATABASE_URL or a throwaway one), worked by in-process workers
// running demo.echo.v1, spread over -inboxes inbox databases. It reports the time until all are Succeeded, the
// manager's API writes per run, the status lag, and the manager's heap with
// many finished WorkflowRuns in its cache. Run it with `make bench-operator`.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/kubetest"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}

// writeCounter counts the manager's mutating API requests by verb and
// resource.
type writeCounter struct {
	mu     sync.Mutex
	counts map[string]int
	// conflicts counts the writes refused with 409 Conflict (in counts too).
	conflicts map[string]int
	// took holds each write's round trip, in seconds.
	took map[string][]float64
	next http.RoundTripper
}

func (w *writeCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
		res := parts[len(parts)-1]
		if len(parts) >= 2 && (res == "status" || strings.HasPrefix(req.URL.Path, "/apis/events")) {
			res = parts[len(parts)-2] + "/" + res
		}
		if strings.Contains(req.URL.Path, "/events") {
			res = "events"
		} else if strings.Contains(req.URL.Path, "/workflowruns/") {
			res = "workflowruns"
			if strings.HasSuffix(req.URL.Path, "/status") {
				res = "workflowruns/status"
			}
		}
		key := req.Method + " " + res
		t0 := time.Now()
		resp, err := w.next.RoundTrip(req)
		w.mu.Lock()
		w.took[key] = append(w.took[key], time.Since(t0).Seconds())
		w.counts[key]++
		if err == nil && resp.StatusCode == http.StatusConflict {
			w.conflicts[key]++
		}
		w.mu.Unlock()
		return resp, err
	}
	return w.next.RoundTrip(req)
}

// lagRecorder keeps every status-lag sample.
type lagRecorder struct {
	mu      sync.Mutex
	samples []float64
	// at is when each sample was taken, to tell the samples taken while
	// objects were still being created from the later ones.
	at []time.Time
}

func (l *lagRecorder) Observe(v float64) {
	l.mu.Lock()
	l.samples = append(l.samples, v)
	l.at = append(l.at, time.Now())
	l.mu.Unlock()
}

func run() error {
	n := flag.Int("runs", 10000, "WorkflowRuns created at once by 32 clients")
	memRuns := flag.Int("memory-runs", 0, "finished WorkflowRuns in the cache for a second memory reading, when above -runs")
	policy := flag.Bool("finalizer-policy", true, "install the chart's MutatingAdmissionPolicy that adds the finalizer at creation")
	workerProcs := flag.Bool("worker-processes", true, "run the workers as example-worker processes (this process's CPU is then the manager's and the clients')")
	apiProfile := flag.String("apiserver-profile", "", "write a CPU profile of the API server, over the first 60 s after creation starts, to this file")
	floor := flag.Bool("floor", false, "run no operator and no worker: a client patches each run's status to Succeeded once (the API server's floor under any operator)")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile (the manager and the clients) to this file")
	inboxes := flag.Int("inboxes", 1, "inbox databases the runs are spread over, one namespace each: the default inbox and WorkflowInboxes on servers of their own")
	flag.Parse()
	if *floor && (*inboxes != 1 || *memRuns > 0) {
		return fmt.Errorf("-floor runs no manager: it takes one inbox and no -memory-runs")
	}
	ctrl.SetLogger(logrDiscard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dbURL := os.Getenv("DATABASE_URL")
	if dbURL == "" {
		u, stop, err := pgtest.StartServer(ctx)
		if err != nil {
			return err
		}
		defer stop()
		dbURL = u
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	pcfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := engine.Migrate(ctx, pool); err != nil {
		return err
	}
	eng, err := engine.New(pool)
	if err != nil {
		return err
	}

	crds, err := pgtest.RepoFile("config/crd/bases")
	if err != nil {
		return err
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{crds}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("start control plane (is KUBEBUILDER_ASSETS set? use make bench-operator): %w", err)
	}
	defer func() { _ = env.Stop() }()
	scheme := kruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = workflowv1alpha1.AddToScheme(scheme)

	// The manager, configured as cmd/main.go does, with its writes counted.
	mcfg := rest.CopyConfig(cfg)
	mcfg.QPS, mcfg.Burst = 500, 1000 // cmd/main.go's defaults
	counter := &writeCounter{counts: map[string]int{}, conflicts: map[string]int{}, took: map[string][]float64{}}
	mcfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter }
	mgr, err := ctrl.NewManager(mcfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return err
	}
	lags := &lagRecorder{}
	m := controller.NewMetrics(prometheus.NewRegistry())
	m.StatusLag = lags
	watcher := controller.NewInboxWatcher(eng, ctrl.Log)
	if err := mgr.Add(watcher); err != nil {
		return err
	}
	// Every inbox as cmd/main.go serves it, but only its status watcher
	// (the single inbox here runs nothing else either).
	inboxSet := controller.NewInboxSet(mgr.GetClient(), eng, func(ctx context.Context, name string, e *engine.Engine) {
		_ = watcher.For(e, ctrl.Log).Start(ctx)
	}, ctrl.Log, m)
	defer inboxSet.Close()
	if err := mgr.Add(inboxSet); err != nil {
		return err
	}
	if err := (&controller.WorkflowInboxReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Set: inboxSet,
		Migrate: func(ctx context.Context, p *pgxpool.Pool) (int, error) { return engine.InstalledSchemaVersion(ctx, p) },
	}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controller.WorkflowRunReconciler{Client: mgr.GetClient(), Inbox: eng, Inboxes: inboxSet,
		Recorder: mgr.GetEventRecorder("workflowrun-controller"), Changes: watcher.Changes(), Followers: watcher.Followers(), Metrics: m,
		MaxConcurrentReconciles: 16, // the manager's default
	}).SetupWithManager(mgr); err != nil {
		return err
	}
	if !*floor {
		go func() { _ = mgr.Start(ctx) }()
	}

	ccfg := rest.CopyConfig(cfg)
	ccfg.QPS, ccfg.Burst = 1000, 2000
	c, err := client.NewWithWatch(ccfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	// One namespace per inbox: bench-0 in the default inbox, bench-i in
	// WorkflowInbox bench-i on a server of its own.
	pools, urls, err := benchInboxes(ctx, c, pool, dbURL, *inboxes)
	if err != nil {
		return err
	}
	// Workers: 128 handlers in all, spread over the namespaces; in this
	// process, or (-worker-processes) as example-worker processes, so that
	// this process's CPU is the manager's and the clients'.
	for i, p := range pools {
		if *floor {
			break
		}
		if *workerProcs {
			stop, err := startWorkerProcess(ctx, urls[i], benchNamespace(i), max(1, 128/len(pools)))
			if err != nil {
				return err
			}
			defer stop()
			continue
		}
		sdk, err := simpleworkflow.NewClient(p)
		if err != nil {
			return err
		}
		poller, err := simpleworkflow.NewPoller(sdk, simpleworkflow.PollerConfig{
			TypePrefixes: []string{"demo."}, WorkerID: fmt.Sprintf("bench-worker-%d", i), Concurrency: max(1, 128/len(pools)),
			Namespace: benchNamespace(i), Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			return err
		}
		if err := poller.Handle("demo.echo.v1", func(_ context.Context, t *simpleworkflow.Task) (json.RawMessage, error) {
			return t.Payload, nil
		}); err != nil {
			return err
		}
		go func() { _ = poller.Run(ctx) }()
	}
	if *policy {
		// As the chart installs it: the API server adds the finalizer.
		if err := kubetest.ApplyRepoFile(ctx, c, kubetest.FinalizerPolicy, nil); err != nil {
			return err
		}
		if err := waitForFinalizerPolicy(ctx, c); err != nil {
			return err
		}
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("start the CPU profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if *apiProfile != "" {
		stop, err := profileAPIServer(ctx, ccfg, *apiProfile, 60*time.Second)
		if err != nil {
			return err
		}
		defer stop()
	}
	start := time.Now()
	cpu0 := processCPU()
	var then func(context.Context, client.Client, *workflowv1alpha1.WorkflowRun) error
	if *floor {
		then = floorStatus
		// An operator's cache watches every WorkflowRun: so does the floor.
		if err := floorWatch(ctx, c); err != nil {
			return err
		}
		fmt.Println("operator floor: no manager and no worker; the lines below count no write (the clients' status patches are not counted)")
	}
	if err := createRuns(ctx, c, 0, *n, len(pools), then); err != nil {
		return err
	}
	created := time.Since(start)
	if err := waitSucceeded(ctx, c, *n, 5*time.Minute); err != nil {
		return err
	}
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	fmt.Printf("operator scale: %d WorkflowRuns over %d inboxes Succeeded in %.1f s (all created after %.1f s)\n",
		*n, len(pools), elapsed.Seconds(), created.Seconds())
	who := "the manager and the clients; the workers run apart"
	if !*workerProcs {
		who = "the manager, the workers and the clients"
	}
	fmt.Printf("operator cpu: %.0f µs per run (this process: %s)\n", float64(cpu.Microseconds())/float64(*n), who)

	counter.mu.Lock()
	total := 0
	var parts []string
	for k, v := range counter.counts {
		total += v
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(v)/float64(*n)))
		t := counter.took[k]
		slices.Sort(t)
		fmt.Printf("operator api write %s: round trip p50=%.0fms p99=%.0fms\n", k,
			1000*t[len(t)/2], 1000*t[min(len(t)-1, int(0.99*float64(len(t))))])
	}
	conflicts := 0
	for _, v := range counter.conflicts {
		conflicts += v
	}
	counter.mu.Unlock()
	sort.Strings(parts)
	fmt.Printf("operator api writes: %.2f per run (%s; refused with a conflict %.2f, %d in all)\n", float64(total)/float64(*n),
		strings.Join(parts, ", "), float64(conflicts)/float64(*n), conflicts)

	if !*floor {
		byResult, seconds, err := looks("workflowrun")
		if err != nil {
			return err
		}
		var all float64
		for _, v := range byResult {
			all += v
		}
		if all > 0 {
			fmt.Printf("operator looks: %.2f per run (%s), %.1f ms each on average\n", all/float64(*n),
				fmtResults(byResult, float64(*n)), 1000*seconds/all)
		}
	}

	lags.mu.Lock()
	s := slices.Clone(lags.samples)
	lags.mu.Unlock()
	slices.Sort(s)
	q := func(p float64) time.Duration {
		if len(s) == 0 {
			return 0
		}
		return time.Duration(s[min(len(s)-1, int(p*float64(len(s))))] * float64(time.Second)).Round(time.Millisecond)
	}
	fmt.Printf("operator status lag: p50=%s p99=%s (n=%d phase changes)\n", q(0.5), q(0.99), len(s))
	var during, after []float64
	lags.mu.Lock()
	for i, v := range lags.samples {
		if lags.at[i].Before(start.Add(created)) {
			during = append(during, v)
		} else {
			after = append(after, v)
		}
	}
	lags.mu.Unlock()
	p99 := func(v []float64) time.Duration {
		if len(v) == 0 {
			return 0
		}
		slices.Sort(v)
		return time.Duration(v[min(len(v)-1, int(0.99*float64(len(v))))] * float64(time.Second)).Round(time.Millisecond)
	}
	fmt.Printf("operator status lag p99: %s while objects were created (n=%d), %s after (n=%d)\n",
		p99(during), len(during), p99(after), len(after))

	// The heap of this process (the manager, its cache, the workers and the
	// clients: an upper bound of the manager's) with every run finished.
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	fmt.Printf("operator memory: heap %.0f MiB with %d finished WorkflowRuns cached\n", float64(base.HeapAlloc)/(1<<20), *n)
	if *memRuns > *n {
		if err := createRuns(ctx, c, *n, *memRuns, len(pools), nil); err != nil {
			return err
		}
		if err := waitSucceeded(ctx, c, *memRuns, 15*time.Minute); err != nil {
			return err
		}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		fmt.Printf("operator memory: heap %.0f MiB with %d finished WorkflowRuns cached (%.0f MiB with %d; %.1f KiB per object)\n",
			float64(ms.HeapAlloc)/(1<<20), *memRuns, float64(base.HeapAlloc)/(1<<20), *n,
			float64(ms.HeapAlloc-base.HeapAlloc)/1024/float64(*memRuns-*n))
	}
	return nil
}

// createRuns creates WorkflowRuns [from, to) with 32 concurrent clients,
// run i in namespace bench-(i mod spread), calling then (when set) on each
// object its client created.
func createRuns(ctx context.Context, c client.Client, from, to, spread int,
	then func(context.Context, client.Client, *workflowv1alpha1.WorkflowRun) error) error {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				wfr := &workflowv1alpha1.WorkflowRun{
					ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace(i % spread), Name: fmt.Sprintf("run-%05d", i)},
					Spec:       workflowv1alpha1.WorkflowRunSpec{Type: "demo.echo.v1"},
				}
				if err := c.Create(ctx, wfr); err != nil {
					errs <- err
					return
				}
				if then != nil {
					if err := then(ctx, c, wfr); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// waitSucceeded waits until n WorkflowRuns of the namespace are Succeeded,
// following a watch (a list of 10,000 objects every few milliseconds would
// load the API server more than the operator does).
func waitSucceeded(ctx context.Context, c client.WithWatch, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	succeeded := map[string]bool{}
	done := 0
	set := func(name string, ok bool) {
		if succeeded[name] != ok {
			if ok {
				done++
			} else {
				done--
			}
		}
		succeeded[name] = ok
	}
	for {
		var list workflowv1alpha1.WorkflowRunList
		if err := c.List(ctx, &list, client.MatchingLabels{}); err != nil {
			return err
		}
		clear(succeeded)
		done = 0
		for _, w := range list.Items {
			if strings.HasPrefix(w.Namespace, "bench-") {
				set(w.Namespace+"/"+w.Name, w.Status.Phase == workflowv1alpha1.PhaseSucceeded)
			}
		}
		w, err := c.Watch(ctx, &workflowv1alpha1.WorkflowRunList{},
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			return err
		}
		for done < n {
			ev, ok := <-w.ResultChan()
			if !ok {
				break // the watch ended: list again
			}
			if wfr, isRun := ev.Object.(*workflowv1alpha1.WorkflowRun); isRun && strings.HasPrefix(wfr.Namespace, "bench-") {
				set(wfr.Namespace+"/"+wfr.Name, ev.Type != watch.Deleted && wfr.Status.Phase == workflowv1alpha1.PhaseSucceeded)
			}
		}
		w.Stop()
		if done >= n {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("only %d of %d WorkflowRuns Succeeded after %s", done, n, timeout)
		}
	}
}

// waitForFinalizerPolicy waits until a WorkflowRun created (in a dry run)
// gets the finalizer: a policy takes effect a moment after it is created.
func waitForFinalizerPolicy(ctx context.Context, c client.Client) error {
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		probe := &workflowv1alpha1.WorkflowRun{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("policy-probe-%d", i)},
			Spec:       workflowv1alpha1.WorkflowRunSpec{Type: "bench.probe.v1", Cancel: true},
		}
		// The CRD itself may not be served yet either.
		err := c.Create(ctx, probe, client.DryRunAll)
		if err == nil && slices.Contains(probe.Finalizers, controller.Finalizer) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the finalizer policy did not take effect within 30 s (last error: %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
