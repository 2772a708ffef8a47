package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/simple-workflow/simple-workflow/internal/controller"
)

// startRetention runs the manager's maintenance with a retention, its
// retention loop ticking every 50 ms, until the spec ends; stop ends it
// sooner, and done is closed once Start has returned.
func startRetention(name string, retention time.Duration) (stop func(), done chan struct{}) {
	mctx, cancel := context.WithCancel(ctx)
	done = make(chan struct{})
	m := &controller.Maintenance{Engine: eng, Log: ctrl.Log.WithName(name),
		Retention: retention, RetentionInterval: 50 * time.Millisecond, ReapInterval: time.Hour}
	go func() {
		defer close(done)
		defer GinkgoRecover()
		Expect(m.Start(mctx)).To(Succeed())
	}()
	DeferCleanup(func() { cancel(); <-done })
	return cancel, done
}

var _ = Describe("Retention", func() {
	It("deletes finished runs past retention, batch after batch, and keeps the rest", func() {
		typ := "ret" + randomSuffix() + ".v1"
		count := func(where string) func() int {
			return func() int {
				var n int
				Expect(pool.QueryRow(ctx, `select count(*) from workflow.workflow_run where type = $1 and `+where, typ).Scan(&n)).To(Succeed())
				return n
			}
		}
		// 2,300 runs finished long ago (three batches), five finished just
		// now, three still pending.
		_, err := pool.Exec(ctx, `insert into workflow.workflow_run (type, status, attempt, started_at, finished_at)
			select $1, 'succeeded', 1, now() - interval '3 days', now() - interval '3 days' from generate_series(1, 2300)`, typ)
		Expect(err).NotTo(HaveOccurred())
		_, err = pool.Exec(ctx, `insert into workflow.workflow_run (type, status, attempt, started_at, finished_at)
			select $1, 'succeeded', 1, now(), now() from generate_series(1, 5)`, typ)
		Expect(err).NotTo(HaveOccurred())
		_, err = pool.Exec(ctx, `insert into workflow.workflow_run (type) select $1 from generate_series(1, 3)`, typ)
		Expect(err).NotTo(HaveOccurred())
		var events int
		Expect(pool.QueryRow(ctx, `select count(*) from workflow.run_event e join workflow.workflow_run r on r.id = e.workflow_id
			where r.type = $1`, typ).Scan(&events)).To(Succeed())
		Expect(events).To(Equal(2308), "each run has its created event")

		stop, done := startRetention("retention", 24*time.Hour)

		Eventually(count("finished_at < now() - interval '1 day'"), 30*time.Second, 50*time.Millisecond).Should(BeZero())
		Expect(count("status = 'succeeded'")()).To(Equal(5), "runs within retention stay")
		Expect(count("status = 'pending'")()).To(Equal(3), "unfinished runs stay")
		// Trails in the default partition went with their runs; those in a
		// time partition wait for it, and only in one whose span is not over.
		var inDefault, inEndedSpans int
		Expect(pool.QueryRow(ctx, `select count(*) from workflow.workflow_event_default e
			where not exists (select 1 from workflow.workflow_run r where r.id = e.workflow_id)`).Scan(&inDefault)).To(Succeed())
		Expect(inDefault).To(BeZero(), "the events in the default partition went with their runs")
		Eventually(func() int {
			Expect(pool.QueryRow(ctx, `select count(*) from workflow.workflow_event e
				join workflow.history_partitions() p on e.tableoid = ('workflow.' || p.partition_name)::regclass
				where p.to_time <= clock_timestamp() and not p.runs_left`).Scan(&inEndedSpans)).To(Succeed())
			return inEndedSpans
		}, 10*time.Second, 50*time.Millisecond).Should(BeZero(), "no partition emptied by retention is left once its span is over")

		stop()
		Eventually(done, 10*time.Second).Should(BeClosed(), "Start returns once its loops have ended")
	})

	It("drops a partition of the audit trail once retention deleted its runs, and keeps another team's", func() {
		// Two spans of an hour before every partition the database has
		// (the manager makes the day in progress's, a day being the span
		// the specs share; after midnight that may still be yesterday's,
		// made while the suite started): five days before, and three hours
		// before, the earlier of that partition's start and today's.
		var earliest time.Time
		Expect(pool.QueryRow(ctx, "select coalesce(min(from_time), now()) from workflow.history_partitions()").
			Scan(&earliest)).To(Succeed())
		base := earliest.UTC()
		if now := time.Now().UTC(); now.Before(base) {
			base = now
		}
		base = base.Truncate(24 * time.Hour)
		spans := []time.Time{base.Add(-5 * 24 * time.Hour), base.Add(-3 * time.Hour)}
		for _, from := range spans {
			var made bool
			Expect(pool.QueryRow(ctx, "select workflow.create_history_partition($1, $2)", from, from.Add(time.Hour)).
				Scan(&made)).To(Succeed())
			Expect(made).To(BeTrue())
		}
		insertAt := func(typ string, at time.Time, finished bool, n int) {
			status := "pending"
			if finished {
				status = "succeeded"
			}
			for range n {
				_, err := pool.Exec(ctx, `insert into workflow.workflow_run (id, type, status, attempt, started_at, finished_at)
					values ((substr(workflow.run_id_at($1)::text, 1, 14) || '7' || substr(gen_random_uuid()::text, 16))::uuid,
					        $2, $3, case when $4 then 1 else 0 end,
					        case when $4 then $1::timestamptz end, case when $4 then $1::timestamptz end)`,
					at, typ, status, finished)
				Expect(err).NotTo(HaveOccurred())
			}
		}
		gone, kept := "hista"+randomSuffix()+".v1", "histb"+randomSuffix()+".v1"
		insertAt(gone, spans[0].Add(time.Minute), true, 50)
		insertAt(kept, spans[1].Add(time.Minute), false, 5) // another team's, still to run
		partitionOf := func(from time.Time) func() []string {
			return func() []string {
				var names []string
				rows, err := pool.Query(ctx, "select partition_name from workflow.history_partitions() where from_time = $1", from)
				Expect(err).NotTo(HaveOccurred())
				for rows.Next() {
					var n string
					Expect(rows.Scan(&n)).To(Succeed())
					names = append(names, n)
				}
				return names
			}
		}
		Expect(partitionOf(spans[0])()).To(HaveLen(1))

		startRetention("history", 48*time.Hour)

		Eventually(partitionOf(spans[0]), 30*time.Second, 50*time.Millisecond).Should(BeEmpty(),
			"the partition whose runs retention deleted is dropped")
		Expect(partitionOf(spans[1])()).To(HaveLen(1), "a partition with runs left stays")
		var keptEvents int
		Expect(pool.QueryRow(ctx, `select count(*) from workflow.run_event e join workflow.workflow_run r on r.id = e.workflow_id
			where r.type = $1 and e.event_type = 'created'`, kept).Scan(&keptEvents)).To(Succeed())
		Expect(keptEvents).To(Equal(5), "the other team's runs keep their trails")
		_, err := pool.Exec(ctx, "delete from workflow.workflow_run where type = $1", kept)
		Expect(err).NotTo(HaveOccurred())
	})
})
