package logapi

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/simple-workflow/simple-workflow/internal/kubeauth"
)

// The ConfigMap in which kube-apiserver publishes how it authenticates
// itself to aggregated API servers.
const (
	authConfigMapNamespace = "kube-system"
	authConfigMapName      = "extension-apiserver-authentication"
)

// Keys of that ConfigMap.
const (
	keyClientCA      = "requestheader-client-ca-file"
	keyAllowedNames  = "requestheader-allowed-names"
	keyUsername      = "requestheader-username-headers"
	keyUID           = "requestheader-uid-headers"
	keyGroup         = "requestheader-group-headers"
	keyExtraPrefixes = "requestheader-extra-headers-prefix"
)

// errNoClientCert: the request is not from the API server.
var errNoClientCert = errors.New("no client certificate signed by the API server's request-header CA")

// User is who the API server says sent a request.
type User = kubeauth.User

// requestHeader is the API server's request-header authentication, as
// its ConfigMap describes it.
type requestHeader struct {
	roots        *x509.CertPool
	allowedNames []string
	username     []string
	uid          []string
	group        []string
	extraPrefix  []string
}

// loadRequestHeader reads the ConfigMap kube-system/extension-apiserver-authentication.
func loadRequestHeader(ctx context.Context, kube kubernetes.Interface) (*requestHeader, error) {
	cm, err := kube.CoreV1().ConfigMaps(authConfigMapNamespace).Get(ctx, authConfigMapName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read ConfigMap %s/%s: %w", authConfigMapNamespace, authConfigMapName, err)
	}
	return parseRequestHeader(cm.Data)
}

// parseRequestHeader reads the request-header settings of the ConfigMap's
// data: the CA as PEM, the lists as JSON arrays of strings.
func parseRequestHeader(data map[string]string) (*requestHeader, error) {
	where := "ConfigMap " + authConfigMapNamespace + "/" + authConfigMapName
	ca := data[keyClientCA]
	if strings.TrimSpace(ca) == "" {
		return nil, fmt.Errorf("%s has no %s: the API server was started without --requestheader-client-ca-file, so it cannot proxy to aggregated APIs", where, keyClientCA)
	}
	rh := &requestHeader{roots: x509.NewCertPool()}
	if !rh.roots.AppendCertsFromPEM([]byte(ca)) {
		return nil, fmt.Errorf("%s: %s holds no PEM certificate", where, keyClientCA)
	}
	for key, dst := range map[string]*[]string{
		keyAllowedNames: &rh.allowedNames, keyUsername: &rh.username, keyUID: &rh.uid,
		keyGroup: &rh.group, keyExtraPrefixes: &rh.extraPrefix,
	} {
		v := strings.TrimSpace(data[key])
		if v == "" {
			continue
		}
		if err := json.Unmarshal([]byte(v), dst); err != nil {
			return nil, fmt.Errorf("%s: %s is not a JSON list of strings: %w", where, key, err)
		}
	}
	if len(rh.username) == 0 {
		return nil, fmt.Errorf("%s has no %s", where, keyUsername)
	}
	return rh, nil
}

// verified reports whether the request's client certificate chains to the
// request-header CA for client authentication and, when the API server
// names allowed names, has one of them as its common name.
func (rh *requestHeader) verified(r *http.Request) bool {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return false
	}
	leaf := r.TLS.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: rh.roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return false
	}
	return len(rh.allowedNames) == 0 || slices.Contains(rh.allowedNames, leaf.Subject.CommonName)
}

// user reads the user from the request's headers (the request is
// verified): the first user name and UID found, every group, and the extra
// values (a header's key after the prefix, lower case and unescaped).
func (rh *requestHeader) user(h http.Header) User {
	var u User
	first := func(names []string) string {
		for _, n := range names {
			if v := strings.TrimSpace(h.Get(n)); v != "" {
				return v
			}
		}
		return ""
	}
	u.Name, u.UID = first(rh.username), first(rh.uid)
	for _, n := range rh.group {
		u.Groups = append(u.Groups, h.Values(n)...)
	}
	for name, values := range h {
		for _, prefix := range rh.extraPrefix {
			if len(name) <= len(prefix) || !strings.EqualFold(name[:len(prefix)], prefix) {
				continue
			}
			key, err := url.PathUnescape(strings.ToLower(name[len(prefix):]))
			if err != nil {
				continue
			}
			if u.Extra == nil {
				u.Extra = map[string][]string{}
			}
			u.Extra[key] = append(u.Extra[key], values...)
		}
	}
	return u
}
