package e2e

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("the chart's aggregated ClusterRoles", func() {
	// A namespace user holding the chart's -edit role
	// (aggregated into Kubernetes' edit and admin) may create and cancel runs
	// and create registries in that namespace, never write status, and
	// nothing in another namespace; a -view user only reads. (No
	// kube-controller-manager runs here to aggregate them into edit itself:
	// the labels that make Kubernetes do it are checked instead.)
	It("give namespace users exactly the rights the trust model names", func() {
		const ns, other = "e2e-rbac", "e2e-rbac-other"
		createNamespace(ns)
		createNamespace(other)
		prefix := releaseName + "-simple-workflow"
		for _, role := range []string{"view", "edit"} {
			labels := mustKubectl("get", "clusterrole", prefix+"-"+role, "-o", "jsonpath={.metadata.labels}")
			Expect(labels).To(ContainSubstring(`"rbac.authorization.k8s.io/aggregate-to-` + role + `":"true"`))
			mustKubectl("create", "rolebinding", role+"-user", "-n", ns, "--clusterrole="+prefix+"-"+role, "--user="+role+"-user")
		}
		can := func(user string, args ...string) string {
			out, _ := kubectl(append([]string{"auth", "can-i", "--as=" + user}, args...)...)
			return strings.TrimSpace(out)
		}
		for _, c := range []struct {
			user string
			args []string
			want string
		}{
			{"edit-user", []string{"create", "workflowruns.workflow.simpleworkflow.dev", "-n", ns}, "yes"},
			{"edit-user", []string{"patch", "workflowruns.workflow.simpleworkflow.dev", "-n", ns}, "yes"},
			{"edit-user", []string{"create", "workflowregistries.workflow.simpleworkflow.dev", "-n", ns}, "yes"},
			{"edit-user", []string{"patch", "workflowruns.workflow.simpleworkflow.dev", "--subresource=status", "-n", ns}, "no"},
			{"edit-user", []string{"create", "workflowruns.workflow.simpleworkflow.dev", "-n", other}, "no"},
			{"view-user", []string{"list", "workflowruns.workflow.simpleworkflow.dev", "-n", ns}, "yes"},
			{"view-user", []string{"get", "workflowregistries.workflow.simpleworkflow.dev", "-n", ns}, "yes"},
			{"view-user", []string{"create", "workflowruns.workflow.simpleworkflow.dev", "-n", ns}, "no"},
			{"view-user", []string{"patch", "workflowruns.workflow.simpleworkflow.dev", "-n", ns}, "no"},
		} {
			Expect(can(c.user, c.args...)).To(Equal(c.want), "%s can-i %v", c.user, c.args)
		}
	})
})
