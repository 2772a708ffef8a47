package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// errSecretKeyMissing: the inbox's Secret has no (or an empty) URL under
// its key.
var errSecretKeyMissing = errors.New("no database URL under the key")

// errSecretNotFound: the inbox's Secret does not exist.
var errSecretNotFound = errors.New("not found")

// InboxSecretURL reads the database URL a WorkflowInbox's Secret holds,
// under spec.secretRef.key ("url" when empty). reader must read Secrets
// (the manager's API reader: Secrets are not cached).
func InboxSecretURL(ctx context.Context, reader client.Reader, in *workflowv1alpha1.WorkflowInbox) (string, error) {
	ref := in.Spec.SecretRef
	key := ref.Key
	if key == "" {
		key = "url"
	}
	var sec corev1.Secret
	if err := reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("the Secret %s/%s: %w", ref.Namespace, ref.Name, errSecretNotFound)
		}
		return "", fmt.Errorf("read the Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	url := strings.TrimSpace(string(sec.Data[key]))
	if url == "" {
		return "", fmt.Errorf("the Secret %s/%s has no key %q (or it is empty): %w", ref.Namespace, ref.Name, key, errSecretKeyMissing)
	}
	return url, nil
}
