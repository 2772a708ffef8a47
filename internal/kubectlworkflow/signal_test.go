package kubectlworkflow

import (
	"fmt"
	"strings"
	"testing"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// signals is spec.signals as "name=payload" strings.
func signals(run *workflowv1alpha1.WorkflowRun) []string {
	var s []string
	for _, sig := range run.Spec.Signals {
		p := "<none>"
		if sig.Payload != nil {
			p = string(sig.Payload.Raw)
		}
		s = append(s, sig.Name+"="+p)
	}
	return s
}

func wantSignals(t *testing.T, run *workflowv1alpha1.WorkflowRun, want ...string) {
	t.Helper()
	if got := signals(run); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("spec.signals of %s: want %v, got %v", run.Name, want, got)
	}
}

func TestSignal(t *testing.T) {
	e := newEnv(t)
	e.createRun("import-3", "data.import.v1")

	r := e.plugin("signal", "import-3", "pause", "-n", e.ns, "--payload", `{"reason": "maintenance", "until": 1700000000000}`)
	wantCode(t, r, 0)
	if r.stdout != "workflowrun.workflow.simpleworkflow.dev/import-3 signalled (pause)\n" {
		t.Errorf("signal: %s", r)
	}
	r = e.plugin("signal", "import-3", "resume", "-n", e.ns)
	wantCode(t, r, 0)
	wantSignals(t, e.run("import-3"), `pause={"reason":"maintenance","until":1700000000000}`, "resume=<none>")

	// Refused before anything is sent: the object is not written at all.
	before := e.run("import-3").ResourceVersion
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--payload", `{"reason": "maintenance"`}, "--payload is not valid JSON: unexpected end of JSON input"},
		{[]string{"--payload", `{reason: 1}`}, "--payload is not valid JSON: invalid character 'r'"},
		{[]string{"--payload", `'single'`}, "--payload is not valid JSON"},
	} {
		r = e.plugin(append([]string{"signal", "import-3", "pause", "-n", e.ns}, tc.args...)...)
		wantCode(t, r, 1)
		wantIn(t, "stderr", r.stderr, "error: "+tc.msg)
	}
	r = e.plugin("signal", "import-3", "no spaces", "-n", e.ns)
	wantCode(t, r, 1)
	wantIn(t, "stderr of a bad signal name", r.stderr, `signal name "no spaces": must be 1 to 128 characters`)
	if after := e.run("import-3"); after.ResourceVersion != before {
		t.Errorf("a refused signal wrote the run: resourceVersion %s, then %s; signals %v", before, after.ResourceVersion, signals(after))
	}
	r = e.plugin("signal", "import-3", "-n", e.ns)
	wantCode(t, r, 1)
	wantIn(t, "stderr of a missing signal name", r.stderr, "expected 2 argument(s), NAME SIGNAL; got 1")
}

func TestApprove(t *testing.T) {
	e := newEnv(t)
	e.createRun("order-1", "demo.order.v1")
	e.setStatus("order-1", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase = workflowv1alpha1.PhaseWaiting
		s.WaitingFor = &workflowv1alpha1.WaitingFor{Kind: "signal", Step: "approve", Signal: "approve"}
	})

	r := e.plugin("approve", "order-1", "-n", e.ns, "--payload", `{"by":"alice"}`)
	wantCode(t, r, 0)
	if r.stdout != "workflowrun.workflow.simpleworkflow.dev/order-1 approved (signal approve sent)\n" {
		t.Errorf("approve: %s", r)
	}
	wantSignals(t, e.run("order-1"), `approve={"by":"alice"}`)

	// The operator has not delivered it yet (status.signalsSent is 0): a
	// second approve sends nothing.
	r = e.plugin("approve", "order-1", "-n", e.ns)
	wantCode(t, r, 0)
	if r.stdout != `workflowrun.workflow.simpleworkflow.dev/order-1 already approved: signal "approve" is spec.signals[0], not yet delivered`+"\n" {
		t.Errorf("approve again: %s", r)
	}
	wantSignals(t, e.run("order-1"), `approve={"by":"alice"}`)

	// Delivered, and the run waits for the same signal again at a later
	// step: approve sends a second one.
	e.setStatus("order-1", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.SignalsSent = 1
		s.WaitingFor = &workflowv1alpha1.WaitingFor{Kind: "signal", Step: "approve-2", Signal: "approve"}
	})
	r = e.plugin("approve", "order-1", "-n", e.ns)
	wantCode(t, r, 0)
	wantSignals(t, e.run("order-1"), `approve={"by":"alice"}`, "approve=<none>")

	// A run that waits for no signal is refused, and not written.
	for _, tc := range []struct {
		name   string
		status func(*workflowv1alpha1.WorkflowRunStatus)
		msg    string
	}{
		{"running", func(s *workflowv1alpha1.WorkflowRunStatus) { s.Phase = workflowv1alpha1.PhaseRunning },
			"(phase Running): nothing to approve"},
		{"sleeping", func(s *workflowv1alpha1.WorkflowRunStatus) {
			s.Phase, s.WaitingFor = workflowv1alpha1.PhaseWaiting, &workflowv1alpha1.WaitingFor{Kind: "sleep", Step: "cool-off"}
		}, "(phase Waiting, waiting for sleep): nothing to approve"},
		{"new", nil, "(phase not set yet): nothing to approve"},
	} {
		e.createRun(tc.name, "demo.order.v1")
		if tc.status != nil {
			e.setStatus(tc.name, tc.status)
		}
		before := e.run(tc.name).ResourceVersion
		r = e.plugin("approve", tc.name, "-n", e.ns)
		wantCode(t, r, 1)
		wantIn(t, "stderr of approve "+tc.name, r.stderr, "error: workflowrun "+e.ns+"/"+tc.name+" waits for no signal "+tc.msg)
		if after := e.run(tc.name); after.ResourceVersion != before || len(after.Spec.Signals) != 0 {
			t.Errorf("a refused approve wrote %s: %v", tc.name, signals(after))
		}
	}
	r = e.plugin("approve", "order-1", "-n", e.ns, "--payload", "{")
	wantCode(t, r, 1)
	wantIn(t, "stderr of approve with bad JSON", r.stderr, "--payload is not valid JSON")
}

// A signal the inbox would refuse is refused here, where the user sees why:
// to a run that has ended (unless a retry is pending), or with a payload
// over the inbox's limits. Nothing is written.
func TestSignalRefusesWhatTheInboxWould(t *testing.T) {
	e := newEnv(t)
	e.createRun("done-1", "data.import.v1")
	e.setStatus("done-1", func(s *workflowv1alpha1.WorkflowRunStatus) { s.Phase = workflowv1alpha1.PhaseSucceeded })
	r := e.plugin("signal", "done-1", "resume", "-n", e.ns)
	wantCode(t, r, 1)
	wantIn(t, "signal to an ended run", r.stderr, "has ended (Succeeded): a signal would never be taken")
	wantSignals(t, e.run("done-1"))

	e.createRun("live-1", "data.import.v1")
	deep := strings.Repeat("[", 65) + strings.Repeat("]", 65)
	// (A payload over 256 KiB cannot be one argument here: Linux limits
	// one to 128 KiB.)
	for _, c := range []struct{ payload, says string }{
		{deep, "nests 65 levels deep"},
		{`{"text":"a\u0000b"}`, `holds \u0000`},
	} {
		r := e.plugin("signal", "live-1", "resume", "-n", e.ns, "--payload", c.payload)
		if r.code == 0 {
			t.Fatalf("payload %.40q sent", c.payload)
		}
		wantIn(t, "a payload the inbox refuses", r.stderr, c.says)
	}
	wantSignals(t, e.run("live-1"))
	// Sixty-four levels are the most, and go.
	ok := strings.Repeat("[", 64) + strings.Repeat("]", 64)
	wantCode(t, e.plugin("signal", "live-1", "resume", "-n", e.ns, "--payload", ok), 0)
	wantSignals(t, e.run("live-1"), "resume="+ok)
}
