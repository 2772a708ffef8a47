package kubectlworkflow

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// krewPlugin is the part of krew's Plugin (v1alpha2) the manifest must get
// right.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			Sha256 string `json:"sha256"`
			Bin    string `json:"bin"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
		} `json:"platforms"`
	} `json:"spec"`
}

func TestKrewManifest(t *testing.T) {
	path, err := pgtest.RepoFile("plugins/krew/workflow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p krewPlugin
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		t.Fatalf("plugins/krew/workflow.yaml: %v", err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "workflow" {
		t.Errorf("want a krew v1alpha2 Plugin named workflow (kubectl workflow), got %s %s %q", p.APIVersion, p.Kind, p.Metadata.Name)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(p.Spec.Version) || p.Spec.ShortDescription == "" ||
		p.Spec.Description == "" || p.Spec.Homepage != "https://github.com/simple-workflow/simple-workflow" {
		t.Errorf("version, descriptions or homepage: %+v", p.Spec)
	}
	sha := regexp.MustCompile(`^[0-9a-f]{64}$`)
	var platforms []string
	for _, pl := range p.Spec.Platforms {
		goos, arch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		platforms = append(platforms, goos+"/"+arch)
		wantURI := "https://github.com/simple-workflow/simple-workflow/releases/download/" + p.Spec.Version +
			"/kubectl-workflow_" + p.Spec.Version + "_" + goos + "_" + arch + ".tar.gz"
		if pl.URI != wantURI {
			t.Errorf("%s/%s: uri %s, want %s (hack/krew-release.sh names the archives so)", goos, arch, pl.URI, wantURI)
		}
		if !sha.MatchString(pl.Sha256) {
			t.Errorf("%s/%s: sha256 %q is not 64 hexadecimal digits", goos, arch, pl.Sha256)
		}
		// The binary kubectl runs for `kubectl workflow`, from the archive.
		if pl.Bin != "kubectl-workflow" || len(pl.Files) != 1 || pl.Files[0].From != "kubectl-workflow" || pl.Files[0].To != "." {
			t.Errorf("%s/%s: bin %q, files %+v; want kubectl-workflow, copied from the archive", goos, arch, pl.Bin, pl.Files)
		}
	}
	slices.Sort(platforms)
	if want := []string{"darwin/amd64", "darwin/arm64", "linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("platforms %v, want %v", platforms, want)
	}
	if !strings.Contains(string(data), "hack/krew-release.sh") {
		t.Error("the manifest does not say how its sha256 values are filled in")
	}
}
