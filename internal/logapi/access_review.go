package logapi

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	logsv1alpha1 "github.com/simple-workflow/simple-workflow/internal/logapi/v1alpha1"
)

// mayGetLog asks the API server (a SubjectAccessReview) whether user may
// get workflowrunlogs name in namespace.
func mayGetLog(ctx context.Context, kube kubernetes.Interface, user User, namespace, name string) (bool, string, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = v
	}
	sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Name, UID: user.UID, Groups: user.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: "get", Group: logsv1alpha1.Group, Version: logsv1alpha1.Version,
				Resource: logsv1alpha1.Resource, Name: name,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("subject access review of %q (get %s %s/%s): %w", user.Name, logsv1alpha1.Resource, namespace, name, err)
	}
	return sar.Status.Allowed, sar.Status.Reason, nil
}
