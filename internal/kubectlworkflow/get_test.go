package kubectlworkflow

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

func TestGet(t *testing.T) {
	e := newEnv(t)
	e.createRun("order-1", "demo.order.v1")
	until := metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))
	e.setStatus("order-1", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase, s.Attempts, s.RunID = workflowv1alpha1.PhaseWaiting, "1/3", "717e0000-0000-4000-8000-000000000001"
		s.WaitingFor = &workflowv1alpha1.WaitingFor{Kind: "signal", Step: "approve", Signal: "approve", Until: &until}
		s.StepsDone, s.LastStep = 3, "cool-off"
		s.Result = &apiextensionsv1.JSON{Raw: []byte(`{"partial":true}`)}
		s.Conditions = []metav1.Condition{{Type: "Finished", Status: metav1.ConditionFalse, Reason: "Waiting",
			Message: "waiting for signal approve", LastTransitionTime: metav1.Now()}}
	})

	r := e.plugin("get", "order-1", "-n", e.ns)
	wantCode(t, r, 0)
	for _, want := range []string{
		`(?m)^Name:\s+order-1$`,
		`(?m)^Namespace:\s+` + e.ns + `$`,
		`(?m)^Type:\s+demo\.order\.v1$`,
		`(?m)^Phase:\s+Waiting$`,
		`(?m)^Attempts:\s+1/3$`,
		`(?m)^Run ID:\s+717e0000-0000-4000-8000-000000000001$`,
		`(?m)^Created:\s+\S+Z \(\d+s ago\)$`,
		`(?m)^Waiting for:\s+signal "approve" at step approve, until ` + regexp.QuoteMeta(until.UTC().Format(time.RFC3339)) +
			` \(in \d+m\) \(send it: kubectl workflow approve order-1 -n ` + e.ns + `\)$`,
		`(?m)^Last step:\s+cool-off \(3 done\)$`,
		`(?m)^Result:\s+\{"partial":true\}$`,
		`(?m)^Conditions:\n  TYPE\s+STATUS\s+REASON\s+MESSAGE\n  Finished\s+False\s+Waiting\s+waiting for signal approve$`,
	} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("get: want %s in:\n%s", want, r.stdout)
		}
	}

	// -o json and -o yaml print the object as the API server holds it.
	for _, format := range []string{"json", "yaml"} {
		r = e.plugin("get", "order-1", "-n", e.ns, "-o", format)
		wantCode(t, r, 0)
		var got workflowv1alpha1.WorkflowRun
		var err error
		if format == "json" {
			err = json.Unmarshal([]byte(r.stdout), &got)
		} else {
			err = yaml.Unmarshal([]byte(r.stdout), &got)
		}
		if err != nil {
			t.Fatalf("get -o %s: %v\n%s", format, err, r.stdout)
		}
		want := e.run("order-1")
		if got.APIVersion != "workflow.simpleworkflow.dev/v1alpha1" || got.Kind != "WorkflowRun" ||
			got.ResourceVersion != want.ResourceVersion || got.UID != want.UID ||
			got.Status.WaitingFor == nil || got.Status.WaitingFor.Signal != "approve" || got.Status.RunID != want.Status.RunID {
			t.Errorf("get -o %s: got %+v", format, got)
		}
	}

	r = e.plugin("get", "order-1", "-n", e.ns, "-o", "name")
	wantCode(t, r, 0)
	if r.stdout != "workflowrun.workflow.simpleworkflow.dev/order-1\n" {
		t.Errorf("get -o name: %s", r)
	}
}

// A missing run is exit code 1 with kubectl's NotFound message; so is a run
// of another namespace than -n's.
func TestGetMissing(t *testing.T) {
	e := newEnv(t)
	e.createRun("here", "demo.echo.v1")
	for _, args := range [][]string{
		{"get", "nope", "-n", e.ns},
		{"get", "here"}, // in "default"
		{"watch", "nope", "-n", e.ns},
		{"cancel", "nope", "-n", e.ns},
		{"approve", "nope", "-n", e.ns},
		{"retry", "nope", "-n", e.ns},
		{"signal", "nope", "go", "-n", e.ns},
	} {
		r := e.plugin(args...)
		wantCode(t, r, 1)
		if !regexp.MustCompile(`^Error from server \(NotFound\): .*workflowruns\.workflow\.simpleworkflow\.dev "(nope|here)" not found\n$`).MatchString(r.stderr) {
			t.Errorf("%v: want kubectl's NotFound message, got %s", args, r)
		}
		if r.stdout != "" {
			t.Errorf("%v printed to stdout: %s", args, r)
		}
	}

	r := e.plugin("get", "-n", e.ns)
	wantCode(t, r, 1)
	wantIn(t, "stderr of get without a name", r.stderr, "expected 1 argument(s), NAME; got 0", "See 'kubectl workflow get -h' for help and examples.")
	r = e.plugin("get", "here", "-n", e.ns, "--no-such-flag")
	wantCode(t, r, 1)
	wantIn(t, "stderr of an unknown flag", r.stderr, "unknown flag: --no-such-flag", "See 'kubectl workflow get -h'")
}
