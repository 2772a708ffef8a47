package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// loadPython is the Python producer: n runs through the SDK, each retried
// through an outage under its idempotency key.
const loadPython = `
import sys, time
sys.path.insert(0, sys.argv[1])
from simpleworkflow import Client
url, tag, n, ns = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
client = Client(url)
for i in range(n):
    for attempt in range(300):
        try:
            client.create("demo.sleep.v1", {"seconds": 0.05}, idempotency_key=f"{tag}-{i}", max_attempts=20, namespace=ns)
            break
        except Exception as e:
            last = e
            time.sleep(0.1)
    else:
        sys.exit(f"create {tag}-{i}: {last}")
`

var _ = Describe("a load through outages", Ordered, func() {
	const (
		ns          = "e2e-load"
		perProducer = 250
	)

	// 2,000 runs from 8 concurrent producers (2
	// plain SQL, 2 Go SDK, 2 Python SDK, 2 kubectl) while Go workers are
	// SIGKILLed and restarted every second and Postgres is crash-restarted
	// once under the manager and the workers: every run ends exactly once
	// in a final state, each audit trail is complete and ordered, and every
	// WorkflowRun's status converges.
	It("ends every one of 2,000 runs exactly once while workers die and Postgres restarts", func() {
		createNamespace(ns)
		root, err := pgtest.RepoFile(".")
		Expect(err).NotTo(HaveOccurred())
		py, err := exec.Command("bash", filepath.Join(root, "hack", "python-deps.sh")).Output()
		Expect(err).NotTo(HaveOccurred(), "python with psycopg")
		script := writeManifest("load_producer.py", loadPython)

		// Three Go workers with short leases; a killer rotates through them.
		var workersMu sync.Mutex
		workers := make([]*process, 3)
		startWorker := func(i int) *process {
			return start(fmt.Sprintf("load-worker-%d", i), []string{"DATABASE_URL=" + dbURL}, filepath.Join(binDir, "example-worker"),
				"--type-prefixes=demo.sleep.", "--runtime=go", fmt.Sprintf("--worker-id=load-worker-%d", i),
				"--lease-duration=2s", "--reap-interval=1s", "--concurrency=20", "--namespace="+ns)
		}
		for i := range workers {
			workers[i] = startWorker(i)
		}
		DeferCleanup(func() {
			workersMu.Lock()
			defer workersMu.Unlock()
			for _, w := range workers {
				w.stop(syscall.SIGTERM)
			}
		})

		total := func() int {
			var n int
			if err := sdkPool().QueryRow(ctx, `select count(*) from workflow.workflow_run
                where idempotency_key like 'load-%' or source_namespace = $1`, ns).Scan(&n); err != nil {
				return -1
			}
			return n
		}
		open := func() int {
			var n int
			if err := sdkPool().QueryRow(ctx, `select count(*) from workflow.workflow_run
                where (idempotency_key like 'load-%' or source_namespace = $1)
                  and status in ('pending', 'leased')`, ns).Scan(&n); err != nil {
				return -1
			}
			return n
		}

		var producers sync.WaitGroup
		var producerErrs []error
		var errMu sync.Mutex
		produce := func(name string, f func() error) {
			producers.Add(1)
			go func() {
				defer GinkgoRecover()
				defer producers.Done()
				if err := f(); err != nil {
					errMu.Lock()
					producerErrs = append(producerErrs, fmt.Errorf("%s: %w", name, err))
					errMu.Unlock()
				}
			}()
		}
		retry := func(f func() error) error {
			var err error
			for range 300 {
				if err = f(); err == nil {
					return nil
				}
				time.Sleep(100 * time.Millisecond)
			}
			return err
		}
		for p := range 2 {
			produce(fmt.Sprintf("sql-%d", p), func() error {
				for i := range perProducer {
					key := fmt.Sprintf("load-sql-%d-%d", p, i)
					if err := retry(func() error {
						_, err := sdkPool().Exec(ctx, `insert into workflow.workflow_run (type, payload, idempotency_key, max_attempts, namespace)
                            values ('demo.sleep.v1', '{"seconds": 0.05}', $1, 20, $2) on conflict (idempotency_key) do nothing`, key, ns)
						return err
					}); err != nil {
						return err
					}
				}
				return nil
			})
			produce(fmt.Sprintf("go-%d", p), func() error {
				for i := range perProducer {
					key := fmt.Sprintf("load-go-%d-%d", p, i)
					if err := retry(func() error {
						_, err := sdk.Create(ctx, "demo.sleep.v1", map[string]any{"seconds": 0.05},
							&simpleworkflow.CreateOptions{IdempotencyKey: key, MaxAttempts: 20, Namespace: ns})
						return err
					}); err != nil {
						return err
					}
				}
				return nil
			})
			produce(fmt.Sprintf("python-%d", p), func() error {
				out, err := exec.CommandContext(ctx, strings.TrimSpace(string(py)), script,
					filepath.Join(root, "sdk", "python"), dbURL, fmt.Sprintf("load-py-%d", p), fmt.Sprint(perProducer), ns).CombinedOutput()
				if err != nil {
					return fmt.Errorf("%w: %s", err, out)
				}
				return nil
			})
			produce(fmt.Sprintf("kubectl-%d", p), func() error {
				for batch := 0; batch < perProducer; batch += 50 {
					var manifest strings.Builder
					for i := batch; i < batch+50; i++ {
						fmt.Fprintf(&manifest, "---\napiVersion: workflow.simpleworkflow.dev/v1alpha1\nkind: WorkflowRun\n"+
							"metadata: {name: load-k%d-%03d}\nspec: {type: demo.sleep.v1, maxAttempts: 20, payload: {seconds: 0.05}}\n", p, i)
					}
					path := writeManifest(fmt.Sprintf("load-k%d-%d.yaml", p, batch), manifest.String())
					if err := retry(func() error {
						out, err := kubectl("apply", "-n", ns, "-f", path)
						if err != nil {
							return fmt.Errorf("%w: %s", err, out)
						}
						return nil
					}); err != nil {
						return err
					}
				}
				return nil
			})
		}

		// The killer: one worker SIGKILLed and started again every second,
		// until the runs are final (or the spec fails).
		var kills atomic.Int32
		stopKiller := make(chan struct{})
		killerDone := make(chan struct{})
		var stopKillerOnce sync.Once
		DeferCleanup(func() {
			stopKillerOnce.Do(func() { close(stopKiller) })
			<-killerDone
		})
		go func() {
			defer GinkgoRecover()
			defer close(killerDone)
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stopKiller:
					return
				case <-tick.C:
				}
				workersMu.Lock()
				k := i % len(workers)
				workers[k].stop(syscall.SIGKILL)
				workers[k] = startWorker(k)
				workersMu.Unlock()
				kills.Add(1)
			}
		}()

		By("crash-restarting Postgres once a quarter of the runs exist")
		Eventually(total, 120*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 500))
		restarted := time.Now()
		Expect(pg.Restart(ctx)).To(Succeed())
		AddReportEntry("load: Postgres crash-restarted with runs recorded", total())

		producers.Wait()
		Expect(producerErrs).To(BeEmpty())
		Eventually(total, 120*time.Second).Should(Equal(8*perProducer),
			func() string { return "manager log (tail):\n" + tail(manager.output(), 6000) })
		Eventually(open, 240*time.Second, time.Second).Should(BeZero())
		stopKillerOnce.Do(func() { close(stopKiller) })
		<-killerDone
		AddReportEntry("load: every run final after the restart", time.Since(restarted).String())

		By("checking that each run ended once, with a complete, ordered trail")
		var byStatus []string
		rows, err := sdkPool().Query(ctx, `select status || '=' || count(*) from workflow.workflow_run
            where idempotency_key like 'load-%' or source_namespace = $1 group by status order by 1`, ns)
		Expect(err).NotTo(HaveOccurred())
		for rows.Next() {
			var s string
			Expect(rows.Scan(&s)).To(Succeed())
			byStatus = append(byStatus, s)
		}
		Expect(rows.Err()).NotTo(HaveOccurred())
		var (
			runs, terminalNotOnce, notCreatedFirst, notTerminalLast, startOutOfTurn,
			unexplainedStart, outOfOrder, statusMismatch, ranAgain int
		)
		Expect(sdkPool().QueryRow(ctx, `
            with runs as (
                select id, status from workflow.workflow_run
                where idempotency_key like 'load-%' or source_namespace = $1),
            ev as (
                select e.workflow_id, e.event_type, e.created_at,
                       row_number() over w as pos,
                       count(*) over (partition by e.workflow_id) as n,
                       lag(e.event_type) over w as prev_type,
                       lag(e.created_at) over w as prev_at
                from workflow.run_event e join runs r on r.id = e.workflow_id
                window w as (partition by e.workflow_id order by e.id)),
            per_run as (
                select r.id, r.status,
                       count(*) filter (where ev.event_type in ('succeeded', 'failed', 'cancelled')) as terminals,
                       bool_or(ev.pos = 1 and ev.event_type = 'created') as created_first,
                       max(ev.event_type) filter (where ev.pos = ev.n) as last_type,
                       count(*) filter (where ev.event_type = 'started'
                                                    and ev.prev_type not in ('created', 'retried', 'woken')) as bare_starts,
                       count(*) filter (where ev.event_type = 'started') as starts,
                       count(*) filter (where ev.event_type = 'retried') as retries,
                       count(*) filter (where ev.prev_at > ev.created_at) as backwards
                from runs r left join ev on ev.workflow_id = r.id
                group by r.id, r.status)
            select count(*),
                   count(*) filter (where terminals <> 1),
                   count(*) filter (where created_first is not true),
                   count(*) filter (where last_type not in ('succeeded', 'failed', 'cancelled')),
                   count(*) filter (where bare_starts > 0),
                   count(*) filter (where starts > 1 + retries),
                   count(*) filter (where backwards > 0),
                   count(*) filter (where last_type is distinct from status),
                   count(*) filter (where starts > 1)
            from per_run`, ns).Scan(&runs, &terminalNotOnce, &notCreatedFirst, &notTerminalLast, &startOutOfTurn,
			&unexplainedStart, &outOfOrder, &statusMismatch, &ranAgain)).To(Succeed())
		report := fmt.Sprintf("%d runs (%v) from 8 producers; %d worker kills, 1 Postgres crash-restart; "+
			"%d ran again after a lost lease", runs, byStatus, kills.Load(), ranAgain)
		AddReportEntry("load", report)
		GinkgoWriter.Println(report)
		Expect(runs).To(Equal(8 * perProducer))
		Expect(terminalNotOnce).To(BeZero(), "runs without exactly one final event")
		Expect(notCreatedFirst).To(BeZero(), "trails not starting with created")
		Expect(notTerminalLast).To(BeZero(), "trails not ending with the final event")
		Expect(startOutOfTurn).To(BeZero(), "starts (leases) not right after the run became runnable")
		Expect(unexplainedStart).To(BeZero(), "runs started again without a lost lease in between")
		Expect(outOfOrder).To(BeZero(), "trails whose times go backwards")
		Expect(statusMismatch).To(BeZero(), "runs whose status is not their last event")

		By("checking that every WorkflowRun's status converged, once each")
		var mirrored int
		Expect(sdkPool().QueryRow(ctx, "select count(*) from workflow.workflow_run where source_namespace = $1", ns).
			Scan(&mirrored)).To(Succeed())
		Expect(mirrored).To(Equal(2 * perProducer))
		Eventually(func() int {
			return strings.Count(phases(ns)(), "=Succeeded") + strings.Count(phases(ns)(), "=Failed")
		}, 120*time.Second, time.Second).Should(Equal(2 * perProducer))
		Expect(manager.alive()).To(BeTrue(), "the manager exited:\n%s", manager.output())
	})
})
