package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// browse runs a browser action with a bound, so no spec hangs on a page.
func browse[T any](browser context.Context, a chromedp.Action[T]) (T, error) {
	c, cancel := context.WithTimeout(browser, 30*time.Second)
	defer cancel()
	return chromedp.Run(c, a)
}

// chromium is a browser a spec drives, and where its screenshots go.
type chromium struct {
	ctx   context.Context
	shots string
}

// steps runs browser steps with a bound.
func (c *chromium) steps(steps ...chromedp.Action[chromedp.Void]) error {
	_, err := browse(c.ctx, chromedp.Steps(steps...))
	return err
}

// screenshot saves the whole page as name.
func (c *chromium) screenshot(name string) {
	png, err := browse(c.ctx, chromedp.FullScreenshot(100))
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(c.shots, name), png, 0o644)).To(Succeed())
}

// text is the text of the element sel selects.
func (c *chromium) text(sel string) string {
	s, err := browse(c.ctx, chromedp.Text(chromedp.CSS(sel)))
	Expect(err).NotTo(HaveOccurred(), "text of %s", sel)
	return s
}

// startBrowser starts a headless Chromium for the spec (skipping it when
// there is none) and returns its context and where screenshots go:
// CONSOLE_SCREENSHOTS (the documentation's are taken so), else the
// suite's directory. Call it in a BeforeAll.
// openConsole starts b's browser, opens an engine on the suite's inbox and
// waits until the suite's console answers (asking for a Kubernetes token
// before anything); it returns the engine and the console's base URL.
func openConsole(b *chromium) (*engine.Engine, string) {
	b.ctx, b.shots = startBrowser()
	pool, err := pgxpool.New(ctx, dbURL)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(pool.Close)
	eng, err := engine.New(pool)
	Expect(err).NotTo(HaveOccurred())
	base := "http://" + consoleAddr
	Eventually(func() int { code, _ := httpGet(base + "/runs"); return code }, 30*time.Second).Should(Equal(http.StatusUnauthorized))
	return eng, base
}

func startBrowser() (context.Context, string) {
	path := findBrowser()
	if path == "" {
		Skip("no Chromium on PATH (make test installs Debian's chromium with hack/chromium.sh as root)")
	}
	shots := os.Getenv("CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = workDir
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	DeferCleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	DeferCleanup(cancelBrowser)
	Expect(chromedp.Do(browser)).To(Succeed(), "start %s", path)
	return browser, shots
}

// findBrowser returns the path of a Chromium on PATH, or "".
func findBrowser() string {
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	return ""
}

var _ = Describe("the web console", Ordered, func() {
	var (
		browser context.Context
		eng     *engine.Engine
		base    string
	)
	// page runs browser steps with a bound, so no spec hangs on a page.
	b := &chromium{}
	page, screenshot, text := b.steps, b.screenshot, b.text
	nodeStates := func() []string {
		states, err := browse(browser, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#dag g.node')).map(g => g.dataset.step + '=' + g.getAttribute('class').replace('node ', ''))`))
		Expect(err).NotTo(HaveOccurred())
		return states
	}

	BeforeAll(func() {
		eng, base = openConsole(b)
		browser = b.ctx

		By("logging in on the console's login page with a token of an operator allowed the whole inbox")
		mustKubectl("create", "serviceaccount", "console-operator", "-n", chartNamespace)
		mustKubectl("create", "clusterrolebinding", "console-operator", "--clusterrole=cluster-admin",
			"--serviceaccount="+chartNamespace+":console-operator")
		token := strings.TrimSpace(mustKubectl("create", "token", "console-operator", "-n", chartNamespace))
		Expect(page(chromedp.Navigate(base+"/runs"), chromedp.WaitVisible(chromedp.CSS("#login")))).To(Succeed())
		screenshot("console-login.png")
		Expect(page(chromedp.SetValue(chromedp.CSS(`#login textarea[name="token"]`), token),
			chromedp.Submit(chromedp.CSS(`#login`)), chromedp.WaitVisible(chromedp.CSS("#filters")))).To(Succeed())
		Expect(text("#user")).To(Equal("system:serviceaccount:" + chartNamespace + ":console-operator"))
	})

	// work claims the runs of a type as a worker would and ends them: the
	// first succeeds, the second fails, and so on.
	work := func(prefix string) {
		runs, err := eng.ClaimRuns(ctx, engine.ClaimParams{WorkerID: "console-e2e", TypePrefixes: []string{prefix},
			Limit: 100, LeaseDuration: time.Minute})
		Expect(err).NotTo(HaveOccurred())
		for i, r := range runs {
			ref := engine.LeaseRef{ID: r.ID, Token: r.LeaseToken, Attempt: r.Attempt}
			if i%3 == 2 {
				_, err = eng.FailRuns(ctx, "console-e2e", []engine.Failure{{LeaseRef: ref, Error: "the invoice service answered 503"}})
			} else {
				_, err = eng.CompleteRuns(ctx, "console-e2e", []engine.Completion{{LeaseRef: ref,
					Result: json.RawMessage(fmt.Sprintf(`{"invoice": "INV-%04d", "amount": %d}`, i, 100+i))}})
			}
			Expect(err).NotTo(HaveOccurred())
		}
	}

	It("shows the overview of pools and types", func() {
		for i := range 12 {
			_, err := eng.CreateRun(ctx, engine.CreateParams{Type: "console.invoice.v1", MaxAttempts: 1,
				Payload: json.RawMessage(fmt.Sprintf(`{"customer": "c-%d"}`, i))})
			Expect(err).NotTo(HaveOccurred())
		}
		work("console.invoice.")
		// Runnable runs of the pool's namespace, which its depth counts.
		for range 3 {
			_, err := eng.CreateRun(ctx, engine.CreateParams{Type: "console.report.v1", Namespace: "console-e2e"})
			Expect(err).NotTo(HaveOccurred())
		}
		// A worker pool, declared as users do: the manager lists it from its
		// cache of WorkflowRegistry objects.
		mustKubectl("create", "namespace", "console-e2e")
		mustKubectl("apply", "-n", "console-e2e", "-f", writeManifest("console-registry.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRegistry
metadata: {name: invoices}
spec:
  workers:
  - scaleTargetRef: {name: invoice-workers}
    runtime: go
    typePrefixes: [console.invoice., console.report.]
    maxReplicas: 3
`))
		Eventually(func() string {
			Expect(page(chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#types")))).To(Succeed())
			if ok, err := browse(browser, chromedp.Evaluate[bool](`document.querySelector('#pools') !== null`)); err != nil || !ok {
				return ""
			}
			return text("#pools tbody")
		}, 30*time.Second).Should(MatchRegexp(`console-e2e/invoices\s+invoice-workers\s+go\s+console\.invoice\., console\.report\.\s+3\s+0`))
		row := text(`#types tr[data-type="console.invoice.v1"]`)
		Expect(row).To(MatchRegexp(`console\.invoice\.v1\s+0\s+0\s+0\s+—\s+8\s+4`), "runnable, leased, parked, oldest, succeeded and failed in the last hour")
		Expect(text(`#types tr[data-type="console.report.v1"]`)).To(MatchRegexp(`console\.report\.v1\s+3\s+0\s+0\s`))
		bars, err := browse(browser, chromedp.Evaluate[int](`document.querySelectorAll('#types tr[data-type="console.invoice.v1"] svg rect.ok').length`))
		Expect(err).NotTo(HaveOccurred())
		Expect(bars).To(Equal(12))
		screenshot("console-overview.png")
	})

	It("lists runs and filters them", func() {
		Expect(page(chromedp.Navigate(base+"/runs"), chromedp.WaitVisible(chromedp.CSS("#runs")))).To(Succeed())
		Expect(page(
			chromedp.SetValue(chromedp.CSS(`#filters input[name="prefix"]`), "console.invoice."),
			chromedp.SetValue(chromedp.CSS(`#filters select[name="status"]`), "failed"),
			chromedp.Click(chromedp.CSS(`#filters button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#runs`)),
		)).To(Succeed())
		// The submitted form's page replaces the one that had #runs too: read
		// the rows once the browser is at the filtered address.
		failed := "console.invoice.v1 failed"
		Eventually(func() ([]string, error) {
			loc, err := browse(browser, chromedp.Location())
			if err != nil {
				return nil, err
			}
			if !strings.Contains(loc, "prefix=console.invoice.&status=failed") {
				return nil, fmt.Errorf("still at %s", loc)
			}
			return browse(browser, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#runs tbody tr')).map(r => r.cells[1].innerText + ' ' + r.cells[2].innerText)`))
		}, 15*time.Second, 100*time.Millisecond).Should(Equal([]string{failed, failed, failed, failed}))
		screenshotRuns := func() {
			Expect(page(chromedp.Navigate(base+"/runs?prefix=console."), chromedp.WaitVisible(chromedp.CSS("#runs")))).To(Succeed())
			screenshot("console-runs.png")
		}
		screenshotRuns()

		By("refusing a filter it cannot use, with a message")
		Expect(page(chromedp.Navigate(base+"/runs?status=lost"), chromedp.WaitVisible(chromedp.CSS("#error")))).To(Succeed())
		Expect(text("#error")).To(ContainSubstring("status must be one of"))
	})

	It("shows a run's payload as text and updates the page live when the run finishes", func() {
		res, err := eng.CreateRun(ctx, engine.CreateParams{Type: "console.live.v1",
			Payload: json.RawMessage(`{"note": "<script>window.pwned = true</script><img src=x onerror=\"window.pwned = true\">"}`)})
		Expect(err).NotTo(HaveOccurred())
		Expect(page(chromedp.Navigate(base+"/runs/"+res.ID), chromedp.WaitVisible(chromedp.CSS("#payload")))).To(Succeed())
		Expect(text("#payload")).To(ContainSubstring(`<script>window.pwned = true</script>`), "the payload is shown as text")
		pwned, err := browse(browser, chromedp.Evaluate[bool](`window.pwned === true || document.querySelector('#payload script, #payload img') !== null`))
		Expect(err).NotTo(HaveOccurred())
		Expect(pwned).To(BeFalse(), "the payload's markup ran or became elements")
		Expect(text("#status")).To(Equal("pending"))
		Eventually(func() string {
			state, err := browse(browser, chromedp.AttributeValue(chromedp.CSS("#live"), "data-state"))
			Expect(err).NotTo(HaveOccurred())
			return state.Value
		}, 10*time.Second).Should(Equal("live"), "the page's event stream is open")

		By("finishing the run while the page is open: the page changes without a reload")
		_, err = browse(browser, chromedp.Evaluate[bool](`window.marker = 'same page'; true`))
		Expect(err).NotTo(HaveOccurred())
		work("console.live.")
		Eventually(func() string { return text("#status") }, 10*time.Second).Should(Equal("succeeded"))
		marker, err := browse(browser, chromedp.Evaluate[string](`window.marker`))
		Expect(err).NotTo(HaveOccurred())
		Expect(marker).To(Equal("same page"), "the page was reloaded instead of updated")
		Expect(text("#result")).To(ContainSubstring(`"invoice": "INV-0000"`))
		Expect(text("#timeline")).To(ContainSubstring("succeeded"))
	})

	It("draws a DAG workflow's steps with their states", func() {
		def := &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{
			{Name: "fetch", Type: "console.step_fetch.v1"},
			{Name: "enrich", Type: "console.step_enrich.v1", DependsOn: []string{"fetch"}},
			{Name: "score", Type: "console.step_score.v1", DependsOn: []string{"fetch"}},
			{Name: "publish", Type: "console.step_publish.v1", DependsOn: []string{"enrich", "score"}},
		}}
		Expect(eng.UpsertRegistryEntry(ctx, engine.RegistryEntry{WorkflowName: "console.pipeline.v1", Enabled: true,
			Definition: def})).To(Succeed())
		res, err := eng.CreateRun(ctx, engine.CreateParams{Type: "console.pipeline.v1", Payload: json.RawMessage(`{"batch": 7}`)})
		Expect(err).NotTo(HaveOccurred())
		work("console.step_fetch.")
		work("console.step_enrich.")
		Expect(page(chromedp.Navigate(base+"/runs/"+res.ID), chromedp.WaitVisible(chromedp.CSS("#dag")))).To(Succeed())
		Expect(nodeStates()).To(Equal([]string{"fetch=succeeded", "enrich=succeeded", "score=pending", "publish=waiting"}))
		screenshot("console-run.png")

		By("following the live update as the next step finishes")
		work("console.step_score.")
		Eventually(nodeStates, 10*time.Second).Should(Equal([]string{"fetch=succeeded", "enrich=succeeded", "score=succeeded", "publish=pending"}))
	})
})
