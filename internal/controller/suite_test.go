package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// The suite runs the real controllers in a manager against a real
// kube-apiserver (envtest, built by `make envtest`) and a real Postgres, with
// an in-process SDK worker serving the test workflow types.
var (
	ctx       context.Context
	cancel    context.CancelFunc
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client
	scheme    *runtime.Scheme
	dbURL     string
	pool      *pgxpool.Pool
	eng       *engine.Engine
	sdk       *simpleworkflow.Client
	// schedules is the manager's WorkflowSchedule controller.
	schedules *controller.WorkflowScheduleReconciler
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	RunSpecs(t, "Controller Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	ctx, cancel = context.WithCancel(context.Background())

	var err error
	var drop func() error
	dbURL, drop, err = pgtest.CreateDatabase(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(drop)
	pool, err = pgxpool.New(ctx, dbURL)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(pool.Close)
	eng, err = engine.New(pool)
	Expect(err).NotTo(HaveOccurred())
	sdk, err = simpleworkflow.NewClient(pool)
	Expect(err).NotTo(HaveOccurred())

	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(), "run through `make test`, which builds and points KUBEBUILDER_ASSETS at the control plane")
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(testEnv.Stop)

	scheme = runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(workflowv1alpha1.AddToScheme(scheme)).To(Succeed())
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	startManager(ctx)
	go func() {
		defer GinkgoRecover()
		Expect(newSuiteWorker("").Run(ctx)).To(Succeed())
	}()
})

var _ = AfterSuite(func() {
	cancel()
})

// startManager runs the controllers as cmd/main.go wires them.
func startManager(ctx context.Context) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	Expect(err).NotTo(HaveOccurred())
	watcher := controller.NewInboxWatcher(eng, ctrl.Log.WithName("inbox-watch"))
	Expect(mgr.Add(watcher)).To(Succeed())
	m := controller.NewMetrics(prometheus.NewRegistry())
	Expect((&controller.WorkflowRunReconciler{
		Client: mgr.GetClient(), Inbox: eng, Recorder: mgr.GetEventRecorder("workflowrun-controller"),
		Changes: watcher.Changes(), Followers: watcher.Followers(), ResyncPeriod: 5 * time.Second, DAGResyncPeriod: time.Second, Metrics: m,
		// Longer than the manager's 500 ms, so that the specs of a brief
		// Running phase do not depend on this machine's moments.
		RunningStatusDelay: runningStatusDelay,
	}).SetupWithManager(mgr)).To(Succeed())
	Expect((&controller.WorkflowRegistryReconciler{
		Client: mgr.GetClient(), Inbox: eng, Recorder: mgr.GetEventRecorder("workflowregistry-controller"),
	}).SetupWithManager(mgr)).To(Succeed())
	schedules = &controller.WorkflowScheduleReconciler{
		Client: mgr.GetClient(), Inbox: eng, Recorder: mgr.GetEventRecorder("workflowschedule-controller"),
		ResyncPeriod: 2 * time.Second,
	}
	Expect(schedules.SetupWithManager(mgr)).To(Succeed())
	Expect(mgr.Add(&controller.Maintenance{
		Engine: eng, Log: ctrl.Log.WithName("maintenance"), ReapInterval: time.Second, Schedules: schedules,
	})).To(Succeed())
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
}

// newSuiteWorker is an SDK worker for the "test." types of namespace ns
// ("": default). A worker serves one namespace: newNamespace runs one for
// each namespace a spec makes, the suite one for default.
func newSuiteWorker(ns string) *simpleworkflow.Poller {
	p, err := simpleworkflow.NewPoller(sdk, simpleworkflow.PollerConfig{
		TypePrefixes: []string{"test."}, WorkerID: "suite-worker", Concurrency: 32,
		LeaseDuration: 3 * time.Second, PollInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Namespace: ns,
	})
	Expect(err).NotTo(HaveOccurred())
	handlers := map[string]simpleworkflow.HandlerFunc{
		"test.echo.v1": func(_ context.Context, t *simpleworkflow.Task) (json.RawMessage, error) { return t.Payload, nil },
		"test.fail.v1": func(_ context.Context, t *simpleworkflow.Task) (json.RawMessage, error) {
			var in struct{ FailTimes int }
			_ = t.Decode(&in)
			if t.Attempt <= in.FailTimes {
				return nil, errPlanned(t.Attempt)
			}
			return simpleworkflow.JSONResult(map[string]int{"attempts": t.Attempt})
		},
		"test.sleep.v1": func(ctx context.Context, _ *simpleworkflow.Task) (json.RawMessage, error) {
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(time.Minute):
				return nil, nil
			}
		},
		"test.pause.v1": func(ctx context.Context, t *simpleworkflow.Task) (json.RawMessage, error) {
			var in struct{ Ms int }
			_ = t.Decode(&in)
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(time.Duration(in.Ms) * time.Millisecond):
				return nil, nil
			}
		},
		"test.big.v1": func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
			big := make([]byte, controller.MaxResultBytes+100)
			for i := range big {
				big[i] = 'x'
			}
			return simpleworkflow.JSONResult(map[string]string{"blob": string(big)})
		},
	}
	for typ, h := range handlers {
		Expect(p.Handle(typ, h)).To(Succeed())
	}
	return p
}

func errPlanned(attempt int) error { return fmt.Errorf("planned failure on attempt %d", attempt) }

// eventsFor lists the events.k8s.io Events regarding an object, oldest first.
func eventsFor(namespace, name string) []eventsv1.Event {
	var list eventsv1.EventList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(namespace))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// lifecycleReasons is eventReasons without Started: a start is told only
// when a look finds the run running, which depends on how fast it ends.
func lifecycleReasons(namespace, name string) []string {
	var out []string
	for _, r := range eventReasons(namespace, name) {
		if r != workflowv1alpha1.ReasonStarted {
			out = append(out, r)
		}
	}
	return out
}

func eventReasons(namespace, name string) []string {
	var out []string
	for _, e := range eventsFor(namespace, name) {
		out = append(out, e.Reason)
	}
	return out
}
