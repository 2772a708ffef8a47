package controller_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// WorkflowSchedules end to end: admission refuses what it can, the database
// what only it knows; each tick the database fires becomes exactly one run
// and one WorkflowRun adopting it, whoever fires and however many fire at
// once, and a run whose WorkflowRun was never made gets it from the next
// look. The database clock is moved forward instead of waiting for ticks.
var _ = Describe("WorkflowSchedule", func() {
	var ns string
	BeforeEach(func() {
		ns = newNamespace()
		// The specs move the database clock forward; the other specs of
		// the suite compare it with this machine's, so it is put back once
		// the spec's schedules are gone (this cleanup runs last).
		var offset string
		Expect(pool.QueryRow(ctx, "select clock_offset::text from workflow.workflow_settings").Scan(&offset)).To(Succeed())
		DeferCleanup(func() {
			_, err := pool.Exec(ctx, "update workflow.workflow_settings set clock_offset = $1::interval", offset)
			Expect(err).NotTo(HaveOccurred())
		})
	})

	newSchedule := func(name, cron, typ string, p any) *workflowv1alpha1.WorkflowSchedule {
		ws := &workflowv1alpha1.WorkflowSchedule{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: workflowv1alpha1.WorkflowScheduleSpec{
				Schedule:    cron,
				RunTemplate: workflowv1alpha1.WorkflowRunTemplate{Type: typ},
			},
		}
		if p != nil {
			ws.Spec.RunTemplate.Payload = payload(p)
		}
		return ws
	}
	// create creates ws, deleted again when the spec ends so that its ticks
	// stop firing for the specs after it.
	create := func(ws *workflowv1alpha1.WorkflowSchedule) {
		Expect(k8sClient.Create(ctx, ws)).To(Succeed())
		DeferCleanup(func() {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ws))).To(Succeed())
			Eventually(func() error {
				_, err := eng.GetSchedule(ctx, ws.Namespace, ws.Name)
				return err
			}).Should(MatchError(engine.ErrNotFound))
		})
	}
	getSchedule := func(name string) func() *workflowv1alpha1.WorkflowSchedule {
		return func() *workflowv1alpha1.WorkflowSchedule {
			var ws workflowv1alpha1.WorkflowSchedule
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ws); err != nil {
				return nil
			}
			return &ws
		}
	}
	accepted := func(name string) func() metav1.ConditionStatus {
		return func() metav1.ConditionStatus {
			if ws := getSchedule(name)(); ws != nil {
				if c := condition(ws.Status.Conditions, workflowv1alpha1.ConditionAccepted); c != nil && c.ObservedGeneration == ws.Generation {
					return c.Status
				}
			}
			return ""
		}
	}
	// stored waits for the schedule's row in the inbox and returns it.
	stored := func(name string) engine.Schedule {
		var s engine.Schedule
		Eventually(func() error {
			var err error
			s, err = eng.GetSchedule(ctx, ns, name)
			return err
		}).Should(Succeed())
		return s
	}
	// dbNow reads the database clock.
	dbNow := func() time.Time {
		var now time.Time
		Expect(pool.QueryRow(ctx, "select workflow.now()").Scan(&now)).To(Succeed())
		return now
	}
	// clockTo moves the database clock forward to at (never back), as the
	// owner may.
	clockTo := func(at time.Time) {
		if d := at.Sub(dbNow()); d > 0 {
			_, err := pool.Exec(ctx, `update workflow.workflow_settings
				set clock_offset = clock_offset + $1::bigint * interval '1 microsecond'`, d.Microseconds())
			Expect(err).NotTo(HaveOccurred())
		}
	}
	// nextTick moves the clock past the schedule's next tick and returns
	// the tick.
	nextTick := func(name string) time.Time {
		tick := stored(name).NextTickAt
		clockTo(tick.Add(time.Second))
		return tick
	}
	// fired waits until the inbox dealt with tick (or a later one).
	fired := func(name string, tick time.Time) engine.Schedule {
		var s engine.Schedule
		Eventually(func() bool {
			s = stored(name)
			return s.LastTickAt != nil && !s.LastTickAt.Before(tick)
		}).Should(BeTrue(), "tick %s of %s was not dealt with", tick, name)
		return s
	}
	ownedRuns := func(ws *workflowv1alpha1.WorkflowSchedule) []workflowv1alpha1.WorkflowRun {
		var list workflowv1alpha1.WorkflowRunList
		Expect(k8sClient.List(ctx, &list, client.InNamespace(ns),
			client.MatchingLabels{workflowv1alpha1.LabelSchedule: ws.Name})).To(Succeed())
		sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
		return list.Items
	}
	names := func(runs []workflowv1alpha1.WorkflowRun) []string {
		var out []string
		for _, r := range runs {
			if r.DeletionTimestamp.IsZero() {
				out = append(out, r.Name)
			}
		}
		return out
	}
	runName := func(name string, tick time.Time) string { return fmt.Sprintf("%s-%d", name, tick.Unix()) }
	// inboxRuns lists the runs recorded under the schedule's keys: the
	// name of the WorkflowRun each should have -> its run id.
	inboxRuns := func(name string) map[string]string {
		rows, err := pool.Query(ctx, `select idempotency_key, id::text from workflow.workflow_run
			where starts_with(idempotency_key, $1)`, fmt.Sprintf("k8s:%s:schedule/%s/", ns, name))
		Expect(err).NotTo(HaveOccurred())
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var key, id string
			Expect(rows.Scan(&key, &id)).To(Succeed())
			unix := key[strings.LastIndexByte(key, '/')+1:]
			out[name+"-"+unix] = id
		}
		Expect(rows.Err()).NotTo(HaveOccurred())
		return out
	}
	// consistent checks that the schedule's WorkflowRuns are exactly the
	// runs in the inbox (its history limits must keep them all), each adopting its run, and that no WorkflowRun
	// recorded a run of its own.
	consistent := func(ws *workflowv1alpha1.WorkflowSchedule) map[string]string {
		want := inboxRuns(ws.Name)
		Eventually(func(g Gomega) {
			got := map[string]string{}
			for _, r := range ownedRuns(ws) {
				got[r.Name] = r.Status.RunID
			}
			g.Expect(got).To(Equal(want))
		}).Should(Succeed())
		var recorded int
		Expect(pool.QueryRow(ctx, `select count(*) from workflow.workflow_run where source_namespace = $1`, ns).
			Scan(&recorded)).To(Succeed())
		Expect(recorded).To(Equal(len(want)), "runs recorded in the namespace besides the schedule's")
		return want
	}

	DescribeTable("admission refuses a malformed schedule",
		func(mutate func(*workflowv1alpha1.WorkflowSchedule), message string) {
			ws := newSchedule("bad", "0 3 * * *", "test.echo.v1", nil)
			mutate(ws)
			err := k8sClient.Create(ctx, ws)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("minute 60", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.Schedule = "60 * * * *" },
			"the minute field (the first) takes values 0-59"),
		Entry("hour 24", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.Schedule = "0 24 * * *" },
			"the hour field (the second) takes values 0-23"),
		Entry("day of month 0", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.Schedule = "0 0 0 * *" },
			"the day-of-month field (the third) takes values 1-31"),
		Entry("day of month 32 in a list", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.Schedule = "0 0 1,32 * *" },
			"the day-of-month field (the third) takes values 1-31"),
		Entry("month 13", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.Schedule = "0 0 1 13 *" },
			"the month field (the fourth) takes values 1-12 or JAN-DEC"),
		Entry("an unknown month name", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.Schedule = "0 0 1 JANUARY *" },
			"the month field (the fourth)"),
		Entry("weekday 8", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.Schedule = "0 0 * * 8" },
			"the day-of-week field (the fifth) takes values 0-7"),
		Entry("a step of 0", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.Schedule = "*/0 * * * *" },
			"the minute field (the first)"),
		Entry("6 fields", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.Schedule = "0 0 3 * * *" },
			"schedule must be a cron expression of five fields"),
		Entry("garbage", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.Schedule = "every day at noon" },
			"schedule must be a cron expression of five fields"),
		Entry("an unknown macro", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.Schedule = "@sometimes" },
			"the macros are @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly"),
		Entry("129 characters", func(ws *workflowv1alpha1.WorkflowSchedule) {
			ws.Spec.Schedule = strings.Repeat("1,", 60) + "1 * * * *"
			Expect(ws.Spec.Schedule).To(HaveLen(129))
		}, "spec.schedule: Too long: may not be more than 128"),
		Entry("a zone climbing out", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.TimeZone = "../etc/passwd" },
			"timeZone must be a time zone name such as UTC or Europe/Berlin"),
		Entry("a zone with a space", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.TimeZone = "Europe/ Berlin" },
			"timeZone must be a time zone name such as UTC or Europe/Berlin"),
		Entry("a zone of 65 characters", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.TimeZone = strings.Repeat("A", 65) },
			"spec.timeZone: Too long: may not be more than 64"),
		Entry("a name of 53 characters", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Name = strings.Repeat("s", 53) },
			"a WorkflowSchedule's name is at most 52 characters"),
		Entry("an unknown concurrency policy", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.ConcurrencyPolicy = "Sometimes" },
			"spec.concurrencyPolicy"),
		Entry("a starting deadline of 0", func(ws *workflowv1alpha1.WorkflowSchedule) {
			ws.Spec.StartingDeadlineSeconds = new(int64)
		}, "spec.startingDeadlineSeconds"),
		Entry("a history limit of 101", func(ws *workflowv1alpha1.WorkflowSchedule) {
			ws.Spec.SuccessfulRunsHistoryLimit = int32p(101)
		}, "spec.successfulRunsHistoryLimit"),
		Entry("a template type without version", func(ws *workflowv1alpha1.WorkflowSchedule) { ws.Spec.RunTemplate.Type = "reports.nightly" },
			"type must be dot-separated lowercase segments"),
		Entry("a template deadline of 0.5s", func(ws *workflowv1alpha1.WorkflowSchedule) {
			ws.Spec.RunTemplate.Deadline = &metav1.Duration{Duration: 500 * time.Millisecond}
		}, "runTemplate.deadline must be a duration such as 30s, 5m or 2h, between 1s and 8760h"),
	)

	It("admits the forms of cron expressions and zones the database takes", func() {
		for i, c := range []struct{ cron, zone string }{
			{"*/15 9-17 * * MON-FRI", "Europe/Berlin"},
			{"0 0 1,15 * ?", "UTC"},
			{"5-55/10 0-23/2 1-31/3 jan-jun sun", "America/Argentina/Buenos_Aires"},
			{"  0 12 * * 7  ", "Etc/GMT+5"},
			{"@Daily", "Asia/Kolkata"},
			{"@hourly", ""},
		} {
			ws := newSchedule(fmt.Sprintf("ok-%d", i), c.cron, "test.echo.v1", nil)
			ws.Spec.TimeZone = c.zone
			ws.Spec.Suspend = true
			create(ws)
			Eventually(accepted(ws.Name)).Should(Equal(metav1.ConditionTrue), "%q in %q", c.cron, c.zone)
		}
	})

	DescribeTable("what only the database knows gives Accepted=False with its message",
		func(cron, zone, message string) {
			ws := newSchedule("refused", cron, "test.echo.v1", nil)
			ws.Spec.TimeZone = zone
			create(ws)
			Eventually(accepted(ws.Name)).Should(Equal(metav1.ConditionFalse))
			c := condition(getSchedule(ws.Name)().Status.Conditions, workflowv1alpha1.ConditionAccepted)
			Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonInvalidSchedule))
			Expect(c.Message).To(ContainSubstring(message))
			_, err := eng.GetSchedule(ctx, ns, ws.Name)
			Expect(err).To(MatchError(engine.ErrNotFound))
			Eventually(func() []string { return eventReasons(ns, ws.Name) }).Should(ContainElement(workflowv1alpha1.ReasonInvalidSchedule))

			// Fixed, it is accepted and stored.
			patch := client.MergeFrom(getSchedule(ws.Name)())
			fixed := getSchedule(ws.Name)()
			fixed.Spec.Schedule, fixed.Spec.TimeZone = "0 3 * * *", "UTC"
			Expect(k8sClient.Patch(ctx, fixed, patch)).To(Succeed())
			Eventually(accepted(ws.Name)).Should(Equal(metav1.ConditionTrue))
			Expect(stored(ws.Name).Cron).To(Equal("0 3 * * *"))
			Eventually(func() *metav1.Time { return getSchedule(ws.Name)().Status.NextScheduleTime }).ShouldNot(BeNil())
		},
		Entry("an unknown zone", "0 3 * * *", "Mars/Base",
			"the database refused the schedule: schedule "),
		Entry("an unknown zone, named", "0 3 * * *", "Mars/Base", "unknown time zone Mars/Base"),
		Entry("an expression that never fires", "0 0 30 2 *", "UTC",
			"the expression never fires: no month of the month field (2) has day 30"),
	)

	It("makes exactly one WorkflowRun per tick, adopting the run the tick recorded", func() {
		ws := newSchedule("minutely", "* * * * *", "test.echo.v1", map[string]any{"n": 1})
		ws.Spec.RunTemplate.Priority = int32p(7)
		ws.Spec.RunTemplate.RetryPolicy = &workflowv1alpha1.RetryPolicy{BaseDelay: &metav1.Duration{Duration: 2 * time.Second}}
		ws.Spec.RunTemplate.ConcurrencyKey = "tenant-a"
		create(ws)
		Eventually(accepted(ws.Name)).Should(Equal(metav1.ConditionTrue))
		Eventually(func() *metav1.Time { return getSchedule(ws.Name)().Status.NextScheduleTime }).ShouldNot(BeNil())

		var ticks []time.Time
		for range 2 {
			tick := nextTick(ws.Name)
			s := fired(ws.Name, tick)
			Expect(s.LastOutcome).To(Equal(engine.FiringFired))
			ticks = append(ticks, *s.LastTickAt)

			name := runName(ws.Name, *s.LastTickAt)
			Eventually(getRun(ns, name)).ShouldNot(BeNil())
			wfr := getRun(ns, name)()
			Expect(wfr.Labels).To(HaveKeyWithValue(workflowv1alpha1.LabelSchedule, ws.Name))
			Expect(metav1.IsControlledBy(wfr, getSchedule(ws.Name)())).To(BeTrue())
			Expect(wfr.Spec.IdempotencyKey).To(Equal(fmt.Sprintf("schedule/%s/%d", ws.Name, s.LastTickAt.Unix())))
			Expect(wfr.Spec.Type).To(Equal("test.echo.v1"))
			Expect(*wfr.Spec.Priority).To(Equal(int32(7)))
			Expect(wfr.Spec.ConcurrencyKey).To(Equal("tenant-a"))
			Expect(wfr.Spec.RetryPolicy.BaseDelay.Duration).To(Equal(2 * time.Second))
			Eventually(func() string { return getRun(ns, name)().Status.RunID }).Should(Equal(s.LastFiredRun))
			Eventually(phase(ns, name)).Should(Equal(workflowv1alpha1.PhaseSucceeded))

			run, err := eng.GetRun(ctx, s.LastFiredRun)
			Expect(err).NotTo(HaveOccurred())
			Expect(run.ConcurrencyKey).To(Equal("tenant-a"))
			// Named after its WorkflowRun, so that its changes notify it.
			Expect(run.Source.Name).To(Equal(name))
			Expect(run.RetryPolicy).NotTo(BeNil())
			Expect(run.RetryPolicy.BaseDelay).To(Equal(2 * time.Second))
			Expect(run.Priority).To(Equal(7))
		}
		runs := consistent(ws)
		for _, t := range ticks {
			Expect(runs).To(HaveKey(runName(ws.Name, t)))
		}
		Eventually(func(g Gomega) {
			st := getSchedule(ws.Name)().Status
			g.Expect(st.LastScheduleTime).NotTo(BeNil())
			g.Expect(st.LastScheduleTime.Time.Before(ticks[1])).To(BeFalse())
			g.Expect(st.LastOutcome).To(Equal("fired"))
			g.Expect(st.ActiveCount).To(BeZero())
			g.Expect(st.NextScheduleTime).NotTo(BeNil())
		}).Should(Succeed())
		Eventually(func() []string { return eventReasons(ns, ws.Name) }).Should(ContainElement(workflowv1alpha1.ReasonScheduled))

		// The columns as kubectl prints them, once the object it reads has
		// the status just checked (a later tick's status write may be in
		// flight).
		Eventually(func(g Gomega) {
			out, err := kubectl("get", "wfs", ws.Name, "-n", ns)
			g.Expect(err).NotTo(HaveOccurred(), out)
			g.Expect(out).To(MatchRegexp(`(?m)^NAME\s+SCHEDULE\s+TIMEZONE\s+SUSPEND\s+ACTIVE\s+LAST SCHEDULE\s+NEXT SCHEDULE\s+AGE$`))
			g.Expect(out).To(MatchRegexp(`(?m)^minutely\s+\* \* \* \* \*\s+UTC\s+false\s+0\s+\S+\s+\d{4}-\d\d-\d\dT\d\d:\d\d:00Z\s+\S+$`))
		}).WithTimeout(15 * time.Second).Should(Succeed())
	})

	It("gives one run and one WorkflowRun per tick while several managers and callers fire at once", func() {
		ws := newSchedule("raced", "* * * * *", "test.echo.v1", map[string]any{"race": true})
		ws.Spec.SuccessfulRunsHistoryLimit = int32p(100)
		create(ws)
		Eventually(accepted(ws.Name)).Should(Equal(metav1.ConditionTrue))
		id := stored(ws.Name).ID

		// Two more maintenance loops, as a standby taking over would run,
		// and four callers firing in a tight loop, recording what they fired.
		var mu sync.Mutex
		firedBy := map[time.Time]int{}
		record := func(fs []engine.ScheduleFiring) {
			mu.Lock()
			defer mu.Unlock()
			for _, f := range fs {
				if f.ScheduleID == id && f.Outcome == engine.FiringFired {
					firedBy[f.Tick.UTC()]++
				}
			}
		}
		rctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range 2 {
			m := &controller.Maintenance{Engine: eng, Log: GinkgoLogr, ScheduleInterval: 20 * time.Millisecond,
				ReapInterval: time.Hour, MetricsInterval: time.Hour, RetentionInterval: time.Hour,
				Schedules: recordingHandler{next: schedules, record: record}}
			wg.Go(func() { _ = m.Start(rctx) })
		}
		for range 4 {
			wg.Go(func() {
				for rctx.Err() == nil {
					fs, err := eng.FireDueSchedules(rctx, 100)
					if err == nil {
						record(fs)
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
		var last time.Time
		for range 4 {
			tick := nextTick(ws.Name)
			last = *fired(ws.Name, tick).LastTickAt
		}
		stop()
		wg.Wait()

		runs := consistent(ws)
		Expect(runs).To(HaveKey(runName(ws.Name, last)))
		mu.Lock()
		defer mu.Unlock()
		for tick, n := range firedBy {
			Expect(n).To(Equal(1), "tick %s reported fired %d times", tick, n)
			Expect(runs).To(HaveKey(runName(ws.Name, tick)))
		}
		var created int
		Expect(pool.QueryRow(ctx, `select count(*) from workflow.run_event e join workflow.workflow_run r on r.id = e.workflow_id
			where r.source_namespace = $1 and e.event_type = 'created'`, ns).Scan(&created)).To(Succeed())
		Expect(created).To(Equal(len(runs)))
	})

	It("makes the WorkflowRun of a run fired while none could be made", func() {
		ws := newSchedule("catch-up", "* * * * *", "test.echo.v1", nil)
		ws.Spec.SuccessfulRunsHistoryLimit = int32p(100)
		create(ws)
		Eventually(accepted(ws.Name)).Should(Equal(metav1.ConditionTrue))
		id := stored(ws.Name).ID

		// Fired here, not by the manager: nothing makes its WorkflowRun at
		// once. The manager fires every second, so a tick it wins is tried
		// again with the next one.
		var mine *engine.ScheduleFiring
		for attempt := 0; attempt < 5 && mine == nil; attempt++ {
			tick := nextTick(ws.Name)
			Eventually(func() bool {
				fs, err := eng.FireDueSchedules(ctx, 100)
				Expect(err).NotTo(HaveOccurred())
				for _, f := range fs {
					if f.ScheduleID == id && f.Outcome == engine.FiringFired {
						mine = &f
					}
				}
				s := stored(ws.Name)
				return mine != nil || (s.LastTickAt != nil && !s.LastTickAt.Before(tick))
			}).Should(BeTrue())
		}
		Expect(mine).NotTo(BeNil(), "the manager fired every tick first")
		name := runName(ws.Name, mine.Tick)
		Eventually(func() string {
			if wfr := getRun(ns, name)(); wfr != nil {
				return wfr.Status.RunID
			}
			return ""
		}).Should(Equal(mine.RunID))
		consistent(ws)
	})

	It("stops firing while suspended and counts ticks from the resume", func() {
		ws := newSchedule("pausable", "* * * * *", "test.echo.v1", nil)
		create(ws)
		Eventually(accepted(ws.Name)).Should(Equal(metav1.ConditionTrue))
		id := stored(ws.Name).ID

		patch := client.MergeFrom(getSchedule(ws.Name)())
		paused := getSchedule(ws.Name)()
		paused.Spec.Suspend = true
		Expect(k8sClient.Patch(ctx, paused, patch)).To(Succeed())
		Eventually(func() bool { return stored(ws.Name).Suspend }).Should(BeTrue())
		Eventually(func() *metav1.Time { return getSchedule(ws.Name)().Status.NextScheduleTime }).Should(BeNil())

		clockTo(dbNow().Add(3 * time.Minute))
		fs, err := eng.FireDueSchedules(ctx, 100)
		Expect(err).NotTo(HaveOccurred())
		for _, f := range fs {
			Expect(f.ScheduleID).NotTo(Equal(id))
		}
		Expect(stored(ws.Name).LastTickAt).To(BeNil())
		Consistently(func() []string { return names(ownedRuns(ws)) }, 2*time.Second, 200*time.Millisecond).Should(BeEmpty())

		patch = client.MergeFrom(getSchedule(ws.Name)())
		resumed := getSchedule(ws.Name)()
		resumed.Spec.Suspend = false
		Expect(k8sClient.Patch(ctx, resumed, patch)).To(Succeed())
		Eventually(func() bool { return stored(ws.Name).Suspend }).Should(BeFalse())
		s := fired(ws.Name, nextTick(ws.Name))
		Expect(s.LastOutcome).To(Equal(engine.FiringFired))
		Eventually(func() []string { return names(ownedRuns(ws)) }).Should(Equal([]string{runName(ws.Name, *s.LastTickAt)}))
	})

	It("keeps only the newest finished WorkflowRuns within the history limits", func() {
		ok := newSchedule("history-ok", "* * * * *", "test.echo.v1", nil)
		ok.Spec.SuccessfulRunsHistoryLimit = int32p(1)
		bad := newSchedule("history-bad", "* * * * *", "test.fail.v1", map[string]any{"FailTimes": 99})
		bad.Spec.RunTemplate.MaxAttempts = int32p(1)
		bad.Spec.FailedRunsHistoryLimit = int32p(1)
		create(ok)
		create(bad)
		Eventually(accepted(ok.Name)).Should(Equal(metav1.ConditionTrue))
		Eventually(accepted(bad.Name)).Should(Equal(metav1.ConditionTrue))

		var okLast, badLast time.Time
		for range 3 {
			tick := stored(ok.Name).NextTickAt
			if t := stored(bad.Name).NextTickAt; t.After(tick) {
				tick = t
			}
			clockTo(tick.Add(time.Second))
			okLast, badLast = *fired(ok.Name, tick).LastTickAt, *fired(bad.Name, tick).LastTickAt
			Eventually(phase(ns, runName(ok.Name, okLast))).Should(Equal(workflowv1alpha1.PhaseSucceeded))
			Eventually(phase(ns, runName(bad.Name, badLast))).Should(Equal(workflowv1alpha1.PhaseFailed))
		}
		Eventually(func() []string { return names(ownedRuns(ok)) }).Should(Equal([]string{runName(ok.Name, okLast)}))
		Eventually(func() []string { return names(ownedRuns(bad)) }).Should(Equal([]string{runName(bad.Name, badLast)}))
		// The deleted ones are not made again.
		Consistently(func() []string { return names(ownedRuns(ok)) }, 3*time.Second, 200*time.Millisecond).
			Should(Equal([]string{runName(ok.Name, okLast)}))
		Expect(len(inboxRuns(ok.Name))).To(BeNumerically(">=", 3))
	})

	It("Replace cancels the unfinished run, which its WorkflowRun shows", func() {
		ws := newSchedule("replacing", "* * * * *", "test.sleep.v1", nil)
		ws.Spec.ConcurrencyPolicy = workflowv1alpha1.ScheduleReplace
		create(ws)
		Eventually(accepted(ws.Name)).Should(Equal(metav1.ConditionTrue))

		first := *fired(ws.Name, nextTick(ws.Name)).LastTickAt
		Eventually(getRun(ns, runName(ws.Name, first))).ShouldNot(BeNil())
		Eventually(func() int32 { return getSchedule(ws.Name)().Status.ActiveCount }).Should(Equal(int32(1)))
		s := fired(ws.Name, nextTick(ws.Name))
		Expect(s.LastOutcome).To(Equal(engine.FiringReplaced))
		Eventually(phase(ns, runName(ws.Name, first))).Should(Equal(workflowv1alpha1.PhaseCancelled))
		Eventually(func() string {
			if c := condition(getRun(ns, runName(ws.Name, first))().Status.Conditions, workflowv1alpha1.ConditionFinished); c != nil {
				return c.Message
			}
			return ""
		}).Should(ContainSubstring("cancelled by schedule " + ns + "/" + ws.Name))
		second := runName(ws.Name, *s.LastTickAt)
		Eventually(getRun(ns, second)).ShouldNot(BeNil())
		Eventually(func(g Gomega) {
			st := getSchedule(ws.Name)().Status
			g.Expect(st.LastOutcome).To(Equal("replaced"))
			g.Expect(st.Active).To(HaveLen(1))
			g.Expect(st.Active[0].Name).To(Equal(second))
			g.Expect(st.Active[0].RunID).To(Equal(s.LastFiredRun))
		}).Should(Succeed())
	})

	It("deletes its row in the inbox when deleted", func() {
		ws := newSchedule("gone", "@daily", "test.echo.v1", nil)
		create(ws)
		stored(ws.Name)
		Eventually(func() []string { return getSchedule(ws.Name)().Finalizers }).Should(ContainElement(controller.Finalizer))
		Expect(k8sClient.Delete(ctx, ws)).To(Succeed())
		Eventually(func() error {
			_, err := eng.GetSchedule(ctx, ns, ws.Name)
			return err
		}).Should(MatchError(engine.ErrNotFound))
		Eventually(getSchedule(ws.Name)).Should(BeNil())
	})
})

// recordingHandler records the firings it is told of, then passes them on.
type recordingHandler struct {
	next   controller.FiringHandler
	record func([]engine.ScheduleFiring)
}

func (h recordingHandler) Fired(ctx context.Context, from controller.ScheduleInbox, fs []engine.ScheduleFiring) {
	h.record(fs)
	h.next.Fired(ctx, from, fs)
}
