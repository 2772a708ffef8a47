// Package kubeauth asks the Kubernetes API server what a user it verified
// may do: the SubjectAccessReview the console and the log API both make.
package kubeauth

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// User is who the API server verified: by a TokenReview, or by the
// request headers it sets before it proxies to an aggregated API.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Allowed asks the API server (a SubjectAccessReview) whether user may do
// what attrs describe, and its reason.
func Allowed(ctx context.Context, kube kubernetes.Interface, user User, attrs authorizationv1.ResourceAttributes) (bool, string, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = v
	}
	sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Name, UID: user.UID, Groups: user.Groups, Extra: extra, ResourceAttributes: &attrs,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("subject access review of %q (%s %s.%s %s/%s): %w", user.Name, attrs.Verb,
			attrs.Resource, attrs.Group, attrs.Namespace, attrs.Name, err)
	}
	return sar.Status.Allowed, sar.Status.Reason, nil
}
