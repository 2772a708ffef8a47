package kubectlworkflow

import (
	"bytes"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// The steps of order.fulfil.v1 in README.md, mid-run.
func fulfilSteps() []workflowv1alpha1.DAGStepStatus {
	return []workflowv1alpha1.DAGStepStatus{
		{Name: "reserve", Type: "inventory.reserve.v1", Phase: workflowv1alpha1.StepSucceeded, Attempts: "1/3"},
		{Name: "charge", Type: "billing.charge.v1", Phase: workflowv1alpha1.StepRetrying, Attempts: "2/5", Error: "card declined"},
		{Name: "label", Type: "shipping.label.v1", Phase: workflowv1alpha1.StepRunning, Attempts: "1/3"},
		{Name: "pack", Type: "shipping.pack.v1", Phase: workflowv1alpha1.StepRunning, Elements: "1/3"},
		{Name: "insure", Type: "shipping.insure.v1", Phase: workflowv1alpha1.StepPending},
		{Name: "ship", Type: "shipping.dispatch.v1", Phase: workflowv1alpha1.StepPending},
		{Name: "notify", Type: "shop.notify.v1", Phase: workflowv1alpha1.StepPending},
	}
}

const fulfilRegistry = `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRegistry
metadata: {name: shop}
spec:
  workflows:
  - name: order.fulfil.v1
    steps:
    - {name: reserve, type: inventory.reserve.v1}
    - {name: charge,  type: billing.charge.v1, dependsOn: [reserve], maxAttempts: 5}
    - {name: label,   type: shipping.label.v1, dependsOn: [reserve]}
    - {name: pack,    type: shipping.pack.v1, dependsOn: [reserve], forEach: '$.steps.reserve.result.items'}
    - {name: insure,  type: shipping.insure.v1, dependsOn: [charge], when: '$.payload.value > 1000'}
    - {name: ship,    type: shipping.dispatch.v1, dependsOn: [label, pack, insure]}
    - {name: notify,  type: shop.notify.v1, final: true}
`

// Each step hangs under the dependency defined last; its other
// dependencies are named; the final step hangs under the run.
const fulfilTree = `Steps:
  STEP                  TYPE                  PHASE      ATTEMPTS  NOTE
  order-7               order.fulfil.v1       Running              1/7 succeeded
  ├── reserve           inventory.reserve.v1  Succeeded  1/3
  │   ├── charge        billing.charge.v1     Retrying   2/5       error: card declined
  │   │   └── insure    shipping.insure.v1    Pending
  │   │       └── ship  shipping.dispatch.v1  Pending              also after label, pack
  │   ├── label         shipping.label.v1     Running    1/3
  │   └── pack          shipping.pack.v1      Running              elements 1/3
  └── notify            shop.notify.v1        Pending              final
`

// Without the definition the steps hang under the run, and a line says why.
const fulfilFlat = `Steps:
  STEP         TYPE                  PHASE      ATTEMPTS  NOTE
  order-7      order.fulfil.v1       Running              1/7 succeeded
  ├── reserve  inventory.reserve.v1  Succeeded  1/3
  ├── charge   billing.charge.v1     Retrying   2/5       error: card declined
  ├── label    shipping.label.v1     Running    1/3
  ├── pack     shipping.pack.v1      Running              elements 1/3
  ├── insure   shipping.insure.v1    Pending
  ├── ship     shipping.dispatch.v1  Pending
  └── notify   shop.notify.v1        Pending
  (dependencies not shown: no WorkflowRegistry of namespace NS declares order.fulfil.v1 with these steps)
`

// stepsSection is the "Steps:" part of get's output, up to the next
// section, without the spaces that pad an empty last column.
func stepsSection(out string) string {
	i := strings.Index(out, "Steps:\n")
	if i < 0 {
		return ""
	}
	s := out[i:]
	if j := strings.Index(s, "\nConditions:"); j >= 0 {
		s = s[:j+1]
	}
	return trimLines(s)
}

// trimLines removes the spaces at the end of each line of s.
func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

func TestGetDAGTree(t *testing.T) {
	e := newEnv(t)
	e.createRun("order-7", "order.fulfil.v1")
	e.setStatus("order-7", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase, s.Progress, s.DAGSteps = workflowv1alpha1.PhaseRunning, "1/7", fulfilSteps()
		s.Conditions = []metav1.Condition{{Type: "Finished", Status: metav1.ConditionFalse, Reason: "Running",
			Message: "1 of 7 steps succeeded", LastTransitionTime: metav1.Now()}}
	})

	r := e.plugin("get", "order-7", "-n", e.ns)
	wantCode(t, r, 0)
	if got, want := stepsSection(r.stdout), trimLines(strings.ReplaceAll(fulfilFlat, "NS", e.ns)); got != want {
		t.Errorf("get of a DAG run without its registry:\n%s\nwant:\n%s", got, want)
	}

	e.apply(fulfilRegistry)
	r = e.plugin("get", "order-7", "-n", e.ns)
	wantCode(t, r, 0)
	if got, want := stepsSection(r.stdout), trimLines(fulfilTree); got != want {
		t.Errorf("get of a DAG run:\n%s\nwant:\n%s", got, want)
	}
}

// A status whose dependencies loop (the database refuses such a
// definition, but the tree must not lose steps) still shows every step.
func TestDAGTreeShowsEveryStepOfACycle(t *testing.T) {
	steps := []workflowv1alpha1.DAGStepStatus{
		{Name: "a", Type: "x.a.v1", Phase: workflowv1alpha1.StepPending},
		{Name: "b", Type: "x.b.v1", Phase: workflowv1alpha1.StepPending},
		{Name: "c", Type: "x.c.v1", Phase: workflowv1alpha1.StepPending},
	}
	defs := map[string]stepDef{"a": {dependsOn: []string{"b"}}, "b": {dependsOn: []string{"a"}}, "c": {dependsOn: []string{"c", "zz"}}}
	var buf bytes.Buffer
	run := &workflowv1alpha1.WorkflowRun{ObjectMeta: metav1.ObjectMeta{Name: "loop"}, Spec: workflowv1alpha1.WorkflowRunSpec{Type: "x.loop.v1"}}
	newDAGTree(steps, defs).write(&buf, run)
	for _, name := range []string{"a\t", "b\t", "c\t"} {
		if strings.Count(buf.String(), name) != 1 {
			t.Errorf("step %q not shown once:\n%s", name, buf.String())
		}
	}
}

// apply creates the object of a YAML manifest in the test's namespace.
func (e *env) apply(manifest string) {
	e.t.Helper()
	var reg workflowv1alpha1.WorkflowRegistry
	if err := yaml.UnmarshalStrict([]byte(manifest), &reg); err != nil {
		e.t.Fatal(err)
	}
	reg.Namespace = e.ns
	if err := e.kc.Create(e.ctx, &reg); err != nil {
		e.t.Fatalf("create registry: %v", err)
	}
}
