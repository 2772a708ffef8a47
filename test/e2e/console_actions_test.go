package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// formTokenOf is the form token the console derives from a bearer token
// (HMAC-SHA256 keyed by the token's SHA-256): what a refused user would
// need to forge a form of their own.
func formTokenOf(token string) string {
	key := sha256.Sum256([]byte(token))
	m := hmac.New(sha256.New, key[:])
	m.Write([]byte("simple-workflow console action"))
	return hex.EncodeToString(m.Sum(nil))
}

// Chromium drives the console's actions against the suite's real manager
// and API server: an operator allowed to patch WorkflowRuns approves a run
// parked on a signal through the JSON editor, cancels a run and cancels
// runs in bulk after confirming their count, each recorded with the user
// the API server verified; a user who may only read the namespace sees no
// action, and a form forged from the page is refused with nothing changed.
var _ = Describe("the console's actions", Ordered, func() {
	var (
		browser     context.Context
		eng         *engine.Engine
		base        string
		readerToken string
	)
	const ns = "e2e-console-act"
	b := &chromium{}
	page, screenshot, text := b.steps, b.screenshot, b.text
	has := func(sel string) bool {
		ok, err := browse(browser, chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q) !== null`, sel)))
		Expect(err).NotTo(HaveOccurred())
		return ok
	}
	login := func(token string) {
		Expect(page(chromedp.Navigate(base+"/login"), chromedp.WaitVisible(chromedp.CSS("#login")),
			chromedp.SetValue(chromedp.CSS(`#login textarea[name="token"]`), token),
			chromedp.Submit(chromedp.CSS(`#login`)), chromedp.WaitVisible(chromedp.CSS("#user")))).To(Succeed())
	}
	lastBy := func(id, typ string) string {
		evs, err := eng.ListEvents(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		by := ""
		for _, e := range evs {
			if string(e.Type) == typ {
				var d struct {
					By string `json:"by"`
				}
				Expect(json.Unmarshal(e.Data, &d)).To(Succeed())
				by = d.By
			}
		}
		return by
	}
	// notice waits for the notice of the action just made (the page before
	// it may show the previous action's a moment longer).
	notice := func(sel, want string) {
		Eventually(func() string {
			s, _ := browse(browser, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ""`, sel)))
			return strings.TrimSpace(s)
		}, 15*time.Second, 100*time.Millisecond).Should(Equal(want))
	}
	// open opens a run's page once it shows sel: a namespace's first run
	// reaches the console's list of namespaces within seconds.
	open := func(id, sel string) {
		Eventually(func() bool {
			Expect(page(chromedp.Navigate(base + "/runs/" + id))).To(Succeed())
			return has(sel)
		}, 20*time.Second, 500*time.Millisecond).Should(BeTrue(), "run %s's page shows %s", id, sel)
	}
	status := func(id string) engine.Status {
		r, err := eng.GetRun(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		return r.Status
	}

	BeforeAll(func() {
		eng, base = openConsole(b)
		browser = b.ctx

		mustKubectl("create", "namespace", ns)
		// The operator may patch WorkflowRuns in the namespace (what
		// kubectl workflow cancel needs); the reader only reads them.
		mustKubectl("create", "serviceaccount", "act-operator", "-n", ns)
		mustKubectl("create", "serviceaccount", "act-reader", "-n", ns)
		mustKubectl("create", "role", "act-edit", "-n", ns, "--verb=get,list,watch,patch",
			"--resource=workflowruns.workflow.simpleworkflow.dev")
		mustKubectl("create", "role", "act-view", "-n", ns, "--verb=get,list,watch",
			"--resource=workflowruns.workflow.simpleworkflow.dev")
		mustKubectl("create", "rolebinding", "act-operator", "-n", ns, "--role=act-edit", "--serviceaccount="+ns+":act-operator")
		mustKubectl("create", "rolebinding", "act-reader", "-n", ns, "--role=act-view", "--serviceaccount="+ns+":act-reader")
		readerToken = strings.TrimSpace(mustKubectl("create", "token", "act-reader", "-n", ns))
		login(strings.TrimSpace(mustKubectl("create", "token", "act-operator", "-n", ns)))
		Expect(text("#user")).To(Equal("system:serviceaccount:" + ns + ":act-operator"))
	})

	It("approves a run parked on a signal through the JSON editor, recorded with the verified user", func() {
		id, err := eng.CreateRun(ctx, engine.CreateParams{Type: "act.approval.v1", Namespace: ns,
			Payload: json.RawMessage(`{"order": "A-1042", "amount": 1250}`)})
		Expect(err).NotTo(HaveOccurred())
		runs, err := eng.ClaimRuns(ctx, engine.ClaimParams{WorkerID: "act-e2e", TypePrefixes: []string{"act.approval."},
			Limit: 1, LeaseDuration: time.Minute, Namespace: ns})
		Expect(err).NotTo(HaveOccurred())
		Expect(runs).To(HaveLen(1))
		res, err := eng.ParkRun(ctx, engine.ParkParams{LeaseRef: runs[0].Ref(), WorkerID: "act-e2e",
			Kind: engine.StepKindSignal, Step: "manager-approval", Position: 0, Signal: "approve"})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Status).To(Equal(engine.WriteParked))

		open(id.ID, "#approve")
		Expect(text("#approve h2")).To(ContainSubstring("approve"))
		By("typing JSON that does not parse: the form says so and cannot be sent")
		_, err = browse(browser, chromedp.Evaluate[bool](`document.querySelector('#approve textarea').value = ''; true`))
		Expect(err).NotTo(HaveOccurred())
		Expect(page(chromedp.SendKeys(chromedp.CSS(`#approve textarea`), `{"approved": true, "note": "ok"`))).To(Succeed())
		disabled, err := browse(browser, chromedp.Evaluate[bool](`document.querySelector('#approve button[type=submit]').disabled`))
		Expect(err).NotTo(HaveOccurred())
		Expect(disabled).To(BeTrue())
		Expect(text("#approve .json-error")).To(ContainSubstring("Not JSON"))
		screenshot("console-approve.png")
		By("completing it: the form is sent and the run is woken")
		Expect(page(chromedp.SendKeys(chromedp.CSS(`#approve textarea`), `}`),
			chromedp.WaitEnabled(chromedp.CSS(`#approve button[type=submit]`)),
			chromedp.Click(chromedp.CSS(`#approve button[type=submit]`)),
		)).To(Succeed())
		notice("#action-done", "Signal sent.")
		Expect(lastBy(id.ID, "signal_received")).To(Equal("console: system:serviceaccount:" + ns + ":act-operator"))
		sigs, err := eng.ListSignals(ctx, id.ID)
		Expect(err).NotTo(HaveOccurred())
		Expect(sigs).To(HaveLen(1))
		Expect(string(sigs[0].Payload)).To(MatchJSON(`{"approved": true, "note": "ok"}`))
		r, err := eng.GetRun(ctx, id.ID)
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Wait).To(BeNil(), "the approval woke the run")
		Expect(text("#timeline")).To(ContainSubstring("signal_received"))
	})

	It("sends a signal, cancels a run and retries it, and cancels and retries runs in bulk after confirming their count", func() {
		one, err := eng.CreateRun(ctx, engine.CreateParams{Type: "act.single.v1", Namespace: ns})
		Expect(err).NotTo(HaveOccurred())
		open(one.ID, "#cancel")
		screenshot("console-actions.png")
		const operator = "console: system:serviceaccount:" + ns + ":act-operator"

		By("sending a signal from the form under Send a signal")
		Expect(page(chromedp.Click(chromedp.CSS("#send-signal summary")), chromedp.WaitVisible(chromedp.CSS(`#signal input[name="name"]`)),
			chromedp.SendKeys(chromedp.CSS(`#signal input[name="name"]`), "nudge"),
			chromedp.SendKeys(chromedp.CSS(`#signal textarea`), `{"why": "<b>late</b>"}`),
			chromedp.Click(chromedp.CSS(`#signal button[type=submit]`)))).To(Succeed())
		notice("#action-done", "Signal sent.")
		Expect(lastBy(one.ID, "signal_received")).To(Equal(operator))
		sigs, err := eng.ListSignals(ctx, one.ID)
		Expect(err).NotTo(HaveOccurred())
		Expect(sigs).To(HaveLen(1))
		Expect(sigs[0].Name).To(Equal("nudge"))

		By("cancelling it, then retrying it")
		Expect(page(chromedp.Click(chromedp.CSS(`#cancel button`)))).To(Succeed())
		notice("#action-done", "Cancelled.")
		Expect(status(one.ID)).To(Equal(engine.StatusCancelled))
		Expect(lastBy(one.ID, "cancelled")).To(Equal(operator))
		Expect(page(chromedp.WaitVisible(chromedp.CSS("#retry")), chromedp.Click(chromedp.CSS(`#retry button`)))).To(Succeed())
		notice("#action-done", "Retried: the run is pending again.")
		Expect(status(one.ID)).To(Equal(engine.StatusPending))
		Expect(lastBy(one.ID, "retried")).To(Equal(operator))

		var batch []string
		for range 6 {
			r, err := eng.CreateRun(ctx, engine.CreateParams{Type: "act.batch.v1", Namespace: ns})
			Expect(err).NotTo(HaveOccurred())
			batch = append(batch, r.ID)
		}
		// A bystander of the default namespace, of the same type.
		bystander, err := eng.CreateRun(ctx, engine.CreateParams{Type: "act.batch.v1"})
		Expect(err).NotTo(HaveOccurred())
		Expect(page(chromedp.Navigate(base+"/runs?status=pending&prefix=act.batch."), chromedp.WaitVisible(chromedp.CSS("#bulk-link")),
			chromedp.Click(chromedp.CSS("#bulk-link")), chromedp.WaitVisible(chromedp.CSS("#bulk-confirm")))).To(Succeed())
		Expect(text("#bulk-submit")).To(Equal("Cancel 6 run(s)"))
		screenshot("console-bulk.png")
		Expect(page(chromedp.Click(chromedp.CSS("#bulk-submit")))).To(Succeed())
		notice("#bulk-done", "Cancelled 6 run(s).")
		for _, id := range batch {
			Expect(status(id)).To(Equal(engine.StatusCancelled))
		}
		Expect(status(bystander.ID)).To(Equal(engine.StatusPending), "a run of a namespace the operator may not read")

		By("retrying them in bulk")
		Expect(page(chromedp.Navigate(base+"/runs?status=cancelled&prefix=act.batch."), chromedp.WaitVisible(chromedp.CSS("#bulk-link")))).To(Succeed())
		Expect(text("#bulk-link")).To(ContainSubstring("Retry every run"))
		Expect(page(chromedp.Click(chromedp.CSS("#bulk-link")), chromedp.WaitVisible(chromedp.CSS("#bulk-confirm")))).To(Succeed())
		Expect(text("#bulk-submit")).To(Equal("Retry 6 run(s)"))
		Expect(page(chromedp.Click(chromedp.CSS("#bulk-submit")))).To(Succeed())
		notice("#bulk-done", "Retried 6 run(s).")
		for _, id := range batch {
			Expect(status(id)).To(Equal(engine.StatusPending))
			Expect(lastBy(id, "retried")).To(Equal(operator))
		}
	})

	It("shows a reader no action, and refuses the form a reader forges from the page", func() {
		target, err := eng.CreateRun(ctx, engine.CreateParams{Type: "act.guarded.v1", Namespace: ns})
		Expect(err).NotTo(HaveOccurred())
		Expect(page(chromedp.Click(chromedp.CSS("form.logout button")), chromedp.WaitVisible(chromedp.CSS("#login")))).To(Succeed())
		login(readerToken)
		open(target.ID, "#status")
		Expect(has("#cancel")).To(BeFalse())
		Expect(has("#approve")).To(BeFalse())
		Expect(text("#actions-why")).To(ContainSubstring("needs patch on workflowruns.workflow.simpleworkflow.dev in namespace " + ns))
		code, err := browse(browser, chromedp.Evaluate[int](fmt.Sprintf(`(async () => {
			const r = await fetch('/runs/%s/cancel', {method: 'POST', body: new URLSearchParams({csrf: %q})});
			return r.status;
		})()`, target.ID, formTokenOf(readerToken)), chromedp.EvalAwaitPromise))
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusForbidden))
		Expect(status(target.ID)).To(Equal(engine.StatusPending), "nothing changed")
		Expect(lastBy(target.ID, "cancelled")).To(BeEmpty())

		By("a bulk cancel forged the same way: refused, nothing changed")
		code, err = browse(browser, chromedp.Evaluate[int](fmt.Sprintf(`(async () => {
			const r = await fetch('/runs/bulk', {method: 'POST', body: new URLSearchParams({csrf: %q,
				action: 'cancel', status: 'pending', prefix: 'act.guarded.', expect: '1'})});
			return r.status;
		})()`, formTokenOf(readerToken)), chromedp.EvalAwaitPromise))
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusConflict), "no run the reader may act on: the count does not match")
		Expect(status(target.ID)).To(Equal(engine.StatusPending), "nothing changed")
	})
})
