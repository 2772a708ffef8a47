package e2e

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

var _ = Describe("the chart's log API manifests", func() {
	// With logAPI.enabled, the API server accepts the rendered chart whole
	// (the APIService, the kube-system RoleBinding), and the pieces agree:
	// the APIService names the Service and its port, which reaches the
	// manager's log-api container port, open in its NetworkPolicy to the
	// API server's CIDRs; the caBundle is the CA of the serving certificate,
	// which is valid for the name kube-apiserver checks.
	It("register the APIService on a Service that reaches the manager, with a certificate its caBundle verifies", func() {
		rendered := renderChart("chart-check", "--set", "database.existingSecret=db", "--set", "logAPI.enabled=true",
			"--set-json", `networkPolicy.apiServerCIDRs=["10.0.0.1/32"]`)
		// kubectl apply -n takes no object of another namespace (helm
		// does): the kube-system RoleBinding goes on its own.
		var release, kubeSystem []string
		for doc := range strings.SplitSeq(rendered, "\n---\n") {
			if strings.Contains(doc, "\n  namespace: kube-system\n") {
				kubeSystem = append(kubeSystem, doc)
			} else {
				release = append(release, doc)
			}
		}
		Expect(kubeSystem).To(HaveLen(1))
		out := applyDryRun("chart-rendered-log-api.yaml", strings.Join(release, "\n---\n"))
		Expect(out).To(ContainSubstring("apiservice.apiregistration.k8s.io/v1alpha1.logs.simpleworkflow.dev serverside-applied"))
		path := writeManifest("chart-rendered-log-api-kube-system.yaml", kubeSystem[0])
		out, err := kubectl("apply", "--server-side", "--dry-run=server", "-n", "kube-system", "-f", path)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(Equal("rolebinding.rbac.authorization.k8s.io/chart-check-simple-workflow-log-api-auth-reader serverside-applied (server dry run)\n"))

		var apiService struct {
			Spec struct {
				Group   string `json:"group"`
				Version string `json:"version"`
				Service struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
					Port      int32  `json:"port"`
				} `json:"service"`
				CABundle string `json:"caBundle"`
			} `json:"spec"`
		}
		var secret corev1.Secret
		for doc := range strings.SplitSeq(rendered, "\n---\n") {
			switch {
			case strings.Contains(doc, "\nkind: APIService\n"):
				Expect(yaml.Unmarshal([]byte(doc), &apiService)).To(Succeed())
			case strings.Contains(doc, "\nkind: Secret\n") && strings.Contains(doc, "-log-api-tls\n"):
				Expect(yaml.UnmarshalStrict([]byte(doc), &secret)).To(Succeed())
			}
		}
		spec := apiService.Spec
		Expect(spec.Group + "/" + spec.Version).To(Equal("logs.simpleworkflow.dev/v1alpha1"))
		Expect(spec.Service.Namespace).To(Equal(chartNamespace))

		objs := decodeChart(rendered)
		var svc *corev1.Service
		for i := range objs.services {
			if objs.services[i].Name == spec.Service.Name {
				svc = &objs.services[i]
			}
		}
		Expect(svc).NotTo(BeNil(), "the APIService names Service %s", spec.Service.Name)
		Expect(svc.Spec.Ports).To(HaveLen(1))
		Expect(svc.Spec.Ports[0].Port).To(Equal(spec.Service.Port))
		mgr := objs.deployments[0]
		mc := mgr.Spec.Template.Spec.Containers[0]
		served := containerPort(mc, svc.Spec.Ports[0].TargetPort.StrVal)
		Expect(served).To(Equal("8443/TCP"))
		Expect(mc.Args).To(ContainElements("--log-api-bind-address=:8443", "--log-api-cert-dir=/etc/simple-workflow/log-api"))
		nps := objs.policiesOf(mgr.Spec.Template.Labels)
		Expect(nps).To(HaveLen(1))
		// Open to any source: the aggregator's address is not always one
		// of apiServerCIDRs (which are for egress).
		Expect(ingressPorts(nps[0])).To(HaveKeyWithValue(served, BeEmpty()))
		narrowed := decodeChart(renderChart("chart-check", "--set", "database.existingSecret=db", "--set", "logAPI.enabled=true",
			"--set-json", `logAPI.allowedFrom=[{"ipBlock":{"cidr":"10.9.0.0/16"}}]`))
		nps = narrowed.policiesOf(mgr.Spec.Template.Labels)
		Expect(ingressPorts(nps[0])).To(HaveKeyWithValue(served, ConsistOf(
			networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.9.0.0/16"}})))
		// A release of an older chart upgraded with --reuse-values has none
		// of the new values but enabled: the defaults stand in.
		old := decodeChart(renderChart("chart-check", "--set", "database.existingSecret=db", "--set", "logAPI.enabled=true",
			"--set", "logAPI.port=null", "--set", "logAPI.service=null", "--set", "logAPI.certificateValidityDays=null"))
		Expect(old.deployments[0].Spec.Template.Spec.Containers[0].Args).To(ContainElement("--log-api-bind-address=:8443"))

		caPEM, err := base64.StdEncoding.DecodeString(spec.CABundle)
		Expect(err).NotTo(HaveOccurred())
		Expect(secret.Data["ca.crt"]).To(Equal(caPEM))
		roots := x509.NewCertPool()
		Expect(roots.AppendCertsFromPEM(caPEM)).To(BeTrue())
		block, _ := pem.Decode(secret.Data["tls.crt"])
		Expect(block).NotTo(BeNil())
		cert, err := x509.ParseCertificate(block.Bytes)
		Expect(err).NotTo(HaveOccurred())
		_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: svc.Name + "." + chartNamespace + ".svc",
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		Expect(err).NotTo(HaveOccurred())
	})
})
