// Package kubetest helps tests and benchmarks set up a control plane the
// way the chart does.
package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// FinalizerPolicy is the repository file holding the MutatingAdmissionPolicy
// (and its binding) that adds the WorkflowRun finalizer at creation.
const FinalizerPolicy = "config/admission/workflowrun_finalizer.yaml"

// ApplyRepoFile creates the objects of a multi-document YAML file of the
// repository; edit, when not nil, may change each object first.
func ApplyRepoFile(ctx context.Context, c client.Client, path string, edit func(*unstructured.Unstructured)) error {
	full, err := pgtest.RepoFile(path)
	if err != nil {
		return fmt.Errorf("find %s: %w", path, err)
	}
	data, err := os.ReadFile(full)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	for i, doc := range bytes.Split(data, []byte("\n---\n")) {
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			return fmt.Errorf("%s, document %d: %w", path, i+1, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if edit != nil {
			edit(&obj)
		}
		if err := c.Create(ctx, &obj); err != nil {
			return fmt.Errorf("create %s %s from %s: %w", obj.GetKind(), obj.GetName(), path, err)
		}
	}
	return nil
}
