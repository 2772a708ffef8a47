package logapi

import (
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	logsv1alpha1 "github.com/simple-workflow/simple-workflow/internal/logapi/v1alpha1"
)

// The discovery documents: kube-apiserver's aggregator asks for /apis
// (with aggregated discovery's media types first; it takes this legacy
// APIGroupList too, and then reads /apis/GROUP/VERSION), and for
// /apis/GROUP/VERSION to decide that the APIService is available; clients
// read them through the API server.

func groupVersion() metav1.GroupVersionForDiscovery {
	return metav1.GroupVersionForDiscovery{GroupVersion: logsv1alpha1.GroupVersion.String(), Version: logsv1alpha1.Version}
}

func apiGroup() metav1.APIGroup {
	return metav1.APIGroup{
		TypeMeta:         metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:             logsv1alpha1.Group,
		Versions:         []metav1.GroupVersionForDiscovery{groupVersion()},
		PreferredVersion: groupVersion(),
	}
}

// serveGroupList serves /apis.
func serveGroupList(w http.ResponseWriter, _ *http.Request) {
	g := apiGroup()
	g.TypeMeta = metav1.TypeMeta{}
	writeJSON(w, http.StatusOK, metav1.APIGroupList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
		Groups:   []metav1.APIGroup{g},
	})
}

// serveGroup serves /apis/logs.simpleworkflow.dev.
func serveGroup(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, apiGroup())
}

// serveResources serves /apis/logs.simpleworkflow.dev/v1alpha1.
func serveResources(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: logsv1alpha1.GroupVersion.String(),
		APIResources: []metav1.APIResource{{
			Name:         logsv1alpha1.Resource,
			SingularName: logsv1alpha1.Singular,
			Namespaced:   true,
			Kind:         logsv1alpha1.Kind,
			Verbs:        metav1.Verbs{"get"},
		}},
	})
}
