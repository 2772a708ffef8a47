package e2e

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// renderChart runs helm template on the chart in chartNamespace.
func renderChart(release string, args ...string) string {
	root, err := pgtest.RepoFile(".")
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	cmd := exec.CommandContext(ctx, helmBin, append([]string{"template", release, filepath.Join(root, "charts", "simple-workflow"),
		"--namespace", chartNamespace}, args...)...)
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		ExpectWithOffset(1, err).NotTo(HaveOccurred(), string(ee.Stderr))
	}
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return string(out)
}

// applyDryRun applies rendered manifests server-side without persisting
// them; the API server must accept them whole, without a warning.
func applyDryRun(name, rendered string) string {
	path := writeManifest(name, rendered)
	out, err := kubectl("apply", "--server-side", "--dry-run=server", "-n", chartNamespace, "-f", path)
	ExpectWithOffset(1, err).NotTo(HaveOccurred(), out)
	ExpectWithOffset(1, out).NotTo(ContainSubstring("Warning"), out)
	return out
}

// chartObjects are the rendered chart's objects of the kinds the
// NetworkPolicy checks need.
type chartObjects struct {
	deployments     []appsv1.Deployment
	services        []corev1.Service
	policies        []networkingv1.NetworkPolicy
	serviceMonitors []map[string]any
}

func decodeChart(rendered string) chartObjects {
	var objs chartObjects
	for doc := range strings.SplitSeq(rendered, "\n---\n") {
		var meta metav1.TypeMeta
		ExpectWithOffset(1, yaml.Unmarshal([]byte(doc), &meta)).To(Succeed(), doc)
		var err error
		switch meta.Kind {
		case "Deployment":
			var o appsv1.Deployment
			err = yaml.UnmarshalStrict([]byte(doc), &o)
			objs.deployments = append(objs.deployments, o)
		case "Service":
			var o corev1.Service
			err = yaml.UnmarshalStrict([]byte(doc), &o)
			objs.services = append(objs.services, o)
		case "NetworkPolicy":
			var o networkingv1.NetworkPolicy
			err = yaml.UnmarshalStrict([]byte(doc), &o)
			objs.policies = append(objs.policies, o)
		case "ServiceMonitor":
			var o map[string]any
			err = yaml.Unmarshal([]byte(doc), &o)
			objs.serviceMonitors = append(objs.serviceMonitors, o)
		}
		ExpectWithOffset(1, err).NotTo(HaveOccurred(), doc)
	}
	return objs
}

// policiesOf returns the policies of the pods labelled podLabels.
func (o chartObjects) policiesOf(podLabels map[string]string) []networkingv1.NetworkPolicy {
	var out []networkingv1.NetworkPolicy
	for _, np := range o.policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		ExpectWithOffset(1, err).NotTo(HaveOccurred())
		if sel.Matches(labels.Set(podLabels)) {
			out = append(out, np)
		}
	}
	return out
}

// portKey names a port of a NetworkPolicy rule, e.g. "5432/TCP".
func portKey(p networkingv1.NetworkPolicyPort) string {
	proto := corev1.ProtocolTCP
	if p.Protocol != nil {
		proto = *p.Protocol
	}
	ExpectWithOffset(2, p.Port).NotTo(BeNil(), "a rule without a port opens every port")
	ExpectWithOffset(2, p.EndPort).To(BeNil(), "a rule opens a port range")
	return p.Port.String() + "/" + string(proto)
}

// ingressPorts maps each port a policy admits to its rule's sources (empty:
// any source).
func ingressPorts(np networkingv1.NetworkPolicy) map[string][]networkingv1.NetworkPolicyPeer {
	out := map[string][]networkingv1.NetworkPolicyPeer{}
	for _, r := range np.Spec.Ingress {
		ExpectWithOffset(1, r.Ports).NotTo(BeEmpty(), "an ingress rule without ports admits every port")
		for _, p := range r.Ports {
			out[portKey(p)] = r.From
		}
	}
	return out
}

// egressPorts maps each port a policy lets out to its rule's destinations
// (empty: any destination).
func egressPorts(np networkingv1.NetworkPolicy) map[string][]networkingv1.NetworkPolicyPeer {
	out := map[string][]networkingv1.NetworkPolicyPeer{}
	for _, r := range np.Spec.Egress {
		ExpectWithOffset(1, r.Ports).NotTo(BeEmpty(), "an egress rule without ports lets every port out")
		for _, p := range r.Ports {
			out[portKey(p)] = r.To
		}
	}
	return out
}

func containerPort(c corev1.Container, name string) string {
	for _, p := range c.Ports {
		if p.Name == name {
			return strconv.Itoa(int(p.ContainerPort)) + "/TCP"
		}
	}
	Fail("container " + c.Name + " has no port " + name)
	return ""
}

var _ = Describe("the chart's manifests", func() {
	// The rendered chart, with the example worker on, applied to the API
	// server (server-side apply, dry run) is accepted whole and draws no
	// warning: no unknown field (an unquoted description with a comma in a
	// flow mapping once split into a stray key), no duplicated key.
	It("apply without a warning from the API server", func() {
		// A release of its own, so that every object is new.
		rendered := renderChart("chart-check", "--set", "database.existingSecret=db",
			"--set", "exampleWorker.enabled=true", "--set", "exampleWorker.database.existingSecret=worker-db")
		// No document repeats a key (a strict decoder refuses duplicates
		// that a lenient one would silently merge).
		for doc := range strings.SplitSeq(rendered, "\n---\n") {
			var v map[string]any
			Expect(yaml.UnmarshalStrict([]byte(doc), &v)).To(Succeed(), doc)
		}
		out := applyDryRun("chart-rendered.yaml", rendered)
		Expect(out).To(ContainSubstring("example-worker"))
		Expect(out).To(ContainSubstring("networkpolicy.networking.k8s.io/chart-check-simple-workflow serverside-applied"))
		Expect(out).To(ContainSubstring("networkpolicy.networking.k8s.io/chart-check-simple-workflow-example-worker serverside-applied"))

		By("narrowing the NetworkPolicies by CIDR and selectors, the API server still accepts them")
		rendered = renderChart("chart-check", "--set", "database.existingSecret=db", "--set", "exampleWorker.enabled=true",
			"--set-json", `networkPolicy.apiServerCIDRs=["10.0.0.1/32","fd00::1/128"]`,
			"--set-json", `networkPolicy.databaseEgress=[{"ipBlock":{"cidr":"10.20.0.0/16","except":["10.20.1.0/24"]}},`+
				`{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"db"}},"podSelector":{"matchLabels":{"app":"postgres"}}}]`,
			"--set-json", `networkPolicy.metricsNamespaceSelector={"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}`,
			"--set-json", `networkPolicy.extraEgress=[{"ports":[{"port":4317}],"to":[{"ipBlock":{"cidr":"10.30.0.5/32"}}]}]`,
			"--set-json", `networkPolicy.extraIngress=[{"ports":[{"port":8082}]}]`)
		applyDryRun("chart-rendered-narrow.yaml", rendered)
		objs := decodeChart(rendered)
		Expect(objs.policies).To(HaveLen(2))
		var mgr appsv1.Deployment
		for _, d := range objs.deployments {
			if !strings.HasSuffix(d.Name, "-example-worker") {
				mgr = d
			}
		}
		nps := objs.policiesOf(mgr.Spec.Template.Labels)
		Expect(nps).To(HaveLen(1))
		egress := egressPorts(nps[0])
		Expect(egress["443/TCP"]).To(ConsistOf(
			networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.1/32"}},
			networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "fd00::1/128"}}))
		Expect(egress["6443/TCP"]).To(HaveLen(2))
		Expect(egress["5432/TCP"]).To(HaveLen(2))
		Expect(egress["4317/TCP"]).To(HaveLen(1))
		in := ingressPorts(nps[0])
		Expect(in["8080/TCP"]).To(ConsistOf(networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}))
		Expect(in).To(HaveKey("8082/TCP"))
	})

	// What the NetworkPolicies let through, by default: the manager admits
	// the port its ServiceMonitor scrapes (through the metrics Service) and
	// the port its probes use, nothing else, and reaches DNS, the API server
	// and Postgres only; the example worker admits nothing and reaches DNS
	// and Postgres only. Every pod of the chart is under exactly one policy.
	It("NetworkPolicies admit the scraped metrics port and the probes, and let out DNS, the API server and Postgres only", func() {
		objs := decodeChart(renderChart("chart-check", "--set", "database.existingSecret=db",
			"--set", "exampleWorker.enabled=true", "--set", "metrics.serviceMonitor.enabled=true"))
		Expect(objs.deployments).To(HaveLen(2))
		Expect(objs.serviceMonitors).To(HaveLen(1))
		var mgr, worker appsv1.Deployment
		for _, d := range objs.deployments {
			if strings.HasSuffix(d.Name, "-example-worker") {
				worker = d
			} else {
				mgr = d
			}
		}
		mgrPolicies := objs.policiesOf(mgr.Spec.Template.Labels)
		Expect(mgrPolicies).To(HaveLen(1), "the manager's pods are under one NetworkPolicy")
		workerPolicies := objs.policiesOf(worker.Spec.Template.Labels)
		Expect(workerPolicies).To(HaveLen(1), "the example worker's pods are under one NetworkPolicy")
		Expect(workerPolicies[0].Name).NotTo(Equal(mgrPolicies[0].Name))
		for _, np := range objs.policies {
			Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress), np.Name)
		}

		By("following the ServiceMonitor to the manager's container port")
		sm := objs.serviceMonitors[0]
		spec := sm["spec"].(map[string]any)
		smPort := spec["endpoints"].([]any)[0].(map[string]any)["port"].(string)
		smSelector := &metav1.LabelSelector{MatchLabels: map[string]string{}}
		for k, v := range spec["selector"].(map[string]any)["matchLabels"].(map[string]any) {
			smSelector.MatchLabels[k] = v.(string)
		}
		sel, err := metav1.LabelSelectorAsSelector(smSelector)
		Expect(err).NotTo(HaveOccurred())
		var targetPort *intstr.IntOrString
		for _, svc := range objs.services {
			if !sel.Matches(labels.Set(svc.Labels)) {
				continue
			}
			Expect(labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(mgr.Spec.Template.Labels))).To(BeTrue(),
				"the scraped Service selects the manager's pods")
			for _, p := range svc.Spec.Ports {
				if p.Name == smPort {
					targetPort = &p.TargetPort
				}
			}
		}
		Expect(targetPort).NotTo(BeNil(), "no Service selected by the ServiceMonitor has the port %q", smPort)
		mc := mgr.Spec.Template.Spec.Containers[0]
		Expect(targetPort.Type).To(Equal(intstr.String))
		scraped := containerPort(mc, targetPort.StrVal)
		Expect(mc.LivenessProbe.HTTPGet.Port.StrVal).To(Equal(mc.ReadinessProbe.HTTPGet.Port.StrVal))
		probed := containerPort(mc, mc.LivenessProbe.HTTPGet.Port.StrVal)

		By("the manager's policy")
		in := ingressPorts(mgrPolicies[0])
		Expect(in).To(HaveLen(2), "only the metrics and health ports are admitted: %v", in)
		Expect(in).To(HaveKeyWithValue(scraped, BeEmpty()), "the scraped port is open to any source by default")
		Expect(in).To(HaveKeyWithValue(probed, BeEmpty()))
		out := egressPorts(mgrPolicies[0])
		Expect(out).To(And(HaveLen(5), HaveKey("53/UDP"), HaveKey("53/TCP"), HaveKey("443/TCP"), HaveKey("6443/TCP"), HaveKey("5432/TCP")), "%v", out)

		By("the example worker's policy")
		Expect(workerPolicies[0].Spec.Ingress).To(BeEmpty(), "the example worker serves no port")
		out = egressPorts(workerPolicies[0])
		Expect(out).To(And(HaveLen(3), HaveKey("53/UDP"), HaveKey("53/TCP"), HaveKey("5432/TCP")), "%v", out)
	})

	// helm install (in the suite's set-up) created the policy and requests
	// ephemeral storage for the manager.
	It("installed the manager's NetworkPolicy and its ephemeral-storage requests and limits", func() {
		var np networkingv1.NetworkPolicy
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: chartNamespace, Name: releaseName + "-simple-workflow"}, &np)).To(Succeed())
		var dep appsv1.Deployment
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: chartNamespace, Name: releaseName + "-simple-workflow"}, &dep)).To(Succeed())
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		Expect(err).NotTo(HaveOccurred())
		Expect(sel.Matches(labels.Set(dep.Spec.Template.Labels))).To(BeTrue())
		res := dep.Spec.Template.Spec.Containers[0].Resources
		Expect(res.Requests.StorageEphemeral().Cmp(resource.MustParse("64Mi"))).To(BeZero(), "%v", res)
		Expect(res.Limits.StorageEphemeral().Cmp(resource.MustParse("256Mi"))).To(BeZero(), "%v", res)

		wdep := decodeChart(renderChart(releaseName, "--set", "database.existingSecret=db", "--set", "exampleWorker.enabled=true",
			"--show-only", "templates/example-worker.yaml")).deployments
		Expect(wdep).To(HaveLen(1))
		wres := wdep[0].Spec.Template.Spec.Containers[0].Resources
		Expect(wres.Requests).To(HaveKey(corev1.ResourceEphemeralStorage))
		Expect(wres.Limits).To(HaveKey(corev1.ResourceEphemeralStorage))
	})
})
