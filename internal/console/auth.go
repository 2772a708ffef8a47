package console

import (
	"context"
	"errors"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/simple-workflow/simple-workflow/internal/kubeauth"
)

// The resources the console authorizes against: WorkflowRuns of a
// namespace, and the virtual cluster-scoped "inbox" resource for the whole
// inbox (runs of every namespace and runs with no Kubernetes source).
const (
	apiGroup      = "workflow.simpleworkflow.dev"
	runsResource  = "workflowruns"
	inboxResource = "inbox"
)

// ErrUnauthenticated is returned for a token that does not authenticate
// anyone (unknown, expired, revoked, or of a deleted ServiceAccount).
var ErrUnauthenticated = errors.New("the token does not authenticate anyone")

// User is who a token authenticated, as a TokenReview tells it.
type User = kubeauth.User

// Reviewer checks bearer tokens and what their holders may do.
type Reviewer interface {
	// Authenticate returns the holder of token, or an error wrapping
	// ErrUnauthenticated.
	Authenticate(ctx context.Context, token string) (User, error)
	// Allowed reports whether user may do verb on resource (in namespace;
	// "" for a cluster-scoped check) of the workflow API group.
	Allowed(ctx context.Context, user User, verb, resource, namespace string) (bool, error)
}

// KubeReviewer answers with TokenReviews and SubjectAccessReviews of a
// Kubernetes API server (Argo Server's client mode).
type KubeReviewer struct {
	// Client talks to the API server as the manager: it needs create on
	// tokenreviews and subjectaccessreviews.
	Client kubernetes.Interface
	// Audiences, when set, are the audiences a token must be meant for.
	Audiences []string
}

// Authenticate implements Reviewer with a TokenReview.
func (k KubeReviewer) Authenticate(ctx context.Context, token string) (User, error) {
	tr, err := k.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: k.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return User{}, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return User{}, ErrUnauthenticated
	}
	u := tr.Status.User
	extra := make(map[string][]string, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = v
	}
	return User{Name: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra}, nil
}

// Allowed implements Reviewer with a SubjectAccessReview.
func (k KubeReviewer) Allowed(ctx context.Context, user User, verb, resource, namespace string) (bool, error) {
	ok, _, err := kubeauth.Allowed(ctx, k.Client, user, authorizationv1.ResourceAttributes{
		Group: apiGroup, Resource: resource, Verb: verb, Namespace: namespace})
	return ok, err
}
