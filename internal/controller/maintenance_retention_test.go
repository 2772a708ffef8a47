package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/simple-workflow/simple-workflow/internal/controller"
)

var _ = Describe("Retention", func() {
	It("deletes finished runs past retention with their events, batch after batch, and keeps the rest", func() {
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
		Expect(pool.QueryRow(ctx, `select count(*) from workflow.workflow_event e join workflow.workflow_run r on r.id = e.workflow_id
			where r.type = $1`, typ).Scan(&events)).To(Succeed())
		Expect(events).To(Equal(2308), "each run has its created event")

		mctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		m := &controller.Maintenance{Engine: eng, Log: ctrl.Log.WithName("retention"),
			Retention: 24 * time.Hour, RetentionInterval: 50 * time.Millisecond, ReapInterval: time.Hour}
		go func() {
			defer close(done)
			defer GinkgoRecover()
			Expect(m.Start(mctx)).To(Succeed())
		}()
		DeferCleanup(func() { stop(); <-done })

		Eventually(count("finished_at < now() - interval '1 day'"), 30*time.Second, 50*time.Millisecond).Should(BeZero())
		Expect(count("status = 'succeeded'")()).To(Equal(5), "runs within retention stay")
		Expect(count("status = 'pending'")()).To(Equal(3), "unfinished runs stay")
		var orphans int
		Expect(pool.QueryRow(ctx, `select count(*) from workflow.workflow_event e
			where not exists (select 1 from workflow.workflow_run r where r.id = e.workflow_id)`).Scan(&orphans)).To(Succeed())
		Expect(orphans).To(BeZero(), "the events went with their runs")

		stop()
		Eventually(done, 10*time.Second).Should(BeClosed(), "Start returns once its loops have ended")
	})
})
