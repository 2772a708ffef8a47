package kubectlworkflow

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// stepDefinitions finds the definition of a DAG run's type in the
// WorkflowRegistries of the type's namespace (spec.typeNamespace, else the
// run's) and returns its steps' dependencies. The status holds no
// dependencies, so without them the tree is flat: when the registries
// cannot be read (no RBAC for them), none declares the type with steps, or
// the declared steps are not the run's (the definition changed since), it
// returns nil and the reason.
func stepDefinitions(ctx context.Context, dc dynamic.Interface, run *workflowv1alpha1.WorkflowRun) (map[string]stepDef, string) {
	ns := run.Spec.TypeNamespace
	if ns == "" {
		ns = run.Namespace
	}
	l, err := dc.Resource(registriesResource()).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Sprintf("the WorkflowRegistries of namespace %s cannot be read: %v", ns, err)
	}
	want := make([]string, 0, len(run.Status.DAGSteps))
	for _, s := range run.Status.DAGSteps {
		want = append(want, s.Name)
	}
	slices.Sort(want)
	for _, it := range l.Items {
		var reg workflowv1alpha1.WorkflowRegistry
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(it.Object, &reg); err != nil {
			continue
		}
		for _, wf := range reg.Spec.Workflows {
			if wf.Name != run.Spec.Type || len(wf.Steps) == 0 {
				continue
			}
			defs := make(map[string]stepDef, len(wf.Steps))
			names := make([]string, 0, len(wf.Steps))
			for _, s := range wf.Steps {
				defs[s.Name] = stepDef{dependsOn: s.DependsOn, final: s.Final}
				names = append(names, s.Name)
			}
			slices.Sort(names)
			if slices.Equal(names, want) {
				return defs, ""
			}
		}
	}
	return nil, fmt.Sprintf("no WorkflowRegistry of namespace %s declares %s with these steps", ns, run.Spec.Type)
}
