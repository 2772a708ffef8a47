package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

var _ = Describe("the chart's manifests", func() {
	// The rendered chart, with the example worker on, applied to the API
	// server (server-side apply, dry run) is accepted whole and draws no
	// warning: no unknown field (an unquoted description with a comma in a
	// flow mapping once split into a stray key), no duplicated key.
	It("apply without a warning from the API server", func() {
		root, err := pgtest.RepoFile(".")
		Expect(err).NotTo(HaveOccurred())
		// A release of its own, so that every object is new.
		cmd := exec.CommandContext(ctx, helmBin, "template", "chart-check", filepath.Join(root, "charts", "simple-workflow"),
			"--namespace", chartNamespace, "--set", "database.existingSecret=db",
			"--set", "exampleWorker.enabled=true", "--set", "exampleWorker.database.existingSecret=worker-db")
		rendered, err := cmd.Output()
		Expect(err).NotTo(HaveOccurred())
		// No document repeats a key (a strict decoder refuses duplicates
		// that a lenient one would silently merge).
		for doc := range strings.SplitSeq(string(rendered), "\n---\n") {
			var v map[string]any
			Expect(yaml.UnmarshalStrict([]byte(doc), &v)).To(Succeed(), doc)
		}
		path := writeManifest("chart-rendered.yaml", string(rendered))
		out, err := kubectl("apply", "--server-side", "--dry-run=server", "-n", chartNamespace, "-f", path)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).NotTo(ContainSubstring("Warning"), out)
		Expect(out).To(ContainSubstring("example-worker"))
	})
})
