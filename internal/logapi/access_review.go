package logapi

import (
	"context"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/simple-workflow/simple-workflow/internal/kubeauth"
	logsv1alpha1 "github.com/simple-workflow/simple-workflow/internal/logapi/v1alpha1"
)

// mayGetLog asks the API server (a SubjectAccessReview) whether user may
// get workflowrunlogs name in namespace.
func mayGetLog(ctx context.Context, kube kubernetes.Interface, user User, namespace, name string) (bool, string, error) {
	return kubeauth.Allowed(ctx, kube, user, authorizationv1.ResourceAttributes{
		Namespace: namespace, Verb: "get", Group: logsv1alpha1.Group, Version: logsv1alpha1.Version,
		Resource: logsv1alpha1.Resource, Name: name,
	})
}
