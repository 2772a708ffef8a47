package logapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/simple-workflow/simple-workflow/internal/devenv"
)

// noInboxes is an Inboxes that is never reached: the requests of this test
// are refused or answered before any read.
type noInboxes struct{}

func (noInboxes) InboxFor(context.Context, string) (Inbox, error) { panic("not reached") }

// testServer serves a Server over TLS with the request-header settings of
// a CA of the test's, and returns it with a client presenting that CA's
// front-proxy certificate (and one presenting none).
func testServer(t *testing.T) (srv *httptest.Server, proxy, anonymous *http.Client) {
	t.Helper()
	_, srv, proxy, anonymous = testServerOf(t)
	return srv, proxy, anonymous
}

// testServerOf is testServer, with the Server.
func testServerOf(t *testing.T) (s *Server, srv *httptest.Server, proxy, anonymous *http.Client) {
	t.Helper()
	ca, caKey, err := devenv.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	rh, err := parseRequestHeader(configMap(t, ca))
	if err != nil {
		t.Fatal(err)
	}
	// A client of an address nothing listens on: no request of this test
	// gets as far as the API server.
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	s, err = New(Config{Kube: kube, Runs: readerNotReached{}, Inboxes: noInboxes{}})
	if err != nil {
		t.Fatal(err)
	}
	s.rh, s.rhErr = rh, nil
	srv = httptest.NewUnstartedServer(s)
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cert, key, err := devenv.SignCert(ca, caKey, devenv.FrontProxyClientName, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		t.Fatal(err)
	}
	transport := srv.Client().Transport.(*http.Transport).Clone()
	transport.TLSClientConfig.Certificates = []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}}
	return s, srv, &http.Client{Transport: transport}, srv.Client()
}

// The reads in flight are bounded: past the bound a read is answered 429
// at once, before any review or read; a name no WorkflowRun can have is
// 404 without one.
func TestServerBoundsTheReadsInFlight(t *testing.T) {
	s, srv, proxy, _ := testServerOf(t)
	for range cap(s.slots) {
		s.slots <- struct{}{}
	}
	base := srv.URL + "/apis/logs.simpleworkflow.dev/v1alpha1/namespaces/a/workflowrunlogs/"
	user := map[string]string{"X-Remote-User": "alice"}
	if code, body := get(t, proxy, http.MethodGet, base+"r", user); code != http.StatusTooManyRequests ||
		!strings.Contains(body, `"reason":"TooManyRequests"`) {
		t.Fatalf("a read past the bound: %d %s", code, body)
	}
	for range cap(s.slots) {
		<-s.slots
	}
	if code, body := get(t, proxy, http.MethodGet, base+"Not_A_Name", user); code != http.StatusNotFound {
		t.Fatalf("a name no WorkflowRun has: %d %s", code, body)
	}
}

// readerNotReached is a client.Reader that is never reached.
type readerNotReached struct{ client.Reader }

func get(t *testing.T, c *http.Client, method, url string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServerDiscoveryAndRefusals(t *testing.T) {
	srv, proxy, anonymous := testServer(t)
	base := srv.URL + "/apis/logs.simpleworkflow.dev/v1alpha1"

	code, body := get(t, proxy, http.MethodGet, base, nil)
	var resources metav1.APIResourceList
	if err := json.Unmarshal([]byte(body), &resources); code != http.StatusOK || err != nil {
		t.Fatalf("resources: %d %s", code, body)
	}
	if resources.Kind != "APIResourceList" || resources.GroupVersion != "logs.simpleworkflow.dev/v1alpha1" ||
		len(resources.APIResources) != 1 || resources.APIResources[0].Name != "workflowrunlogs" ||
		!resources.APIResources[0].Namespaced || resources.APIResources[0].Kind != "WorkflowRunLog" {
		t.Errorf("resources: %s", body)
	}
	code, body = get(t, proxy, http.MethodGet, srv.URL+"/apis", map[string]string{
		"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"})
	var groups metav1.APIGroupList
	if err := json.Unmarshal([]byte(body), &groups); code != http.StatusOK || err != nil || groups.Kind != "APIGroupList" ||
		len(groups.Groups) != 1 || groups.Groups[0].PreferredVersion.GroupVersion != "logs.simpleworkflow.dev/v1alpha1" {
		t.Errorf("/apis: %d %s", code, body)
	}
	code, body = get(t, proxy, http.MethodGet, srv.URL+"/apis/logs.simpleworkflow.dev", nil)
	if code != http.StatusOK || !strings.Contains(body, `"kind":"APIGroup"`) {
		t.Errorf("group: %d %s", code, body)
	}

	status := func(method, url string, header map[string]string, c *http.Client) metav1.Status {
		t.Helper()
		code, body := get(t, c, method, url, header)
		var st metav1.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" || int(st.Code) != code {
			t.Fatalf("%s %s: not a Status: %d %s", method, url, code, body)
		}
		return st
	}
	user := map[string]string{"X-Remote-User": "alice"}
	for _, c := range []struct {
		what   string
		method string
		url    string
		header map[string]string
		client *http.Client
		want   metav1.StatusReason
	}{
		{"no client certificate", http.MethodGet, base, user, anonymous, metav1.StatusReasonUnauthorized},
		{"a read naming no user", http.MethodGet, base + "/namespaces/a/workflowrunlogs/r", nil, proxy, metav1.StatusReasonUnauthorized},
		{"a write", http.MethodPost, base + "/namespaces/a/workflowrunlogs/r", user, proxy, metav1.StatusReasonMethodNotAllowed},
		{"a list", http.MethodGet, base + "/namespaces/a/workflowrunlogs", user, proxy, metav1.StatusReasonMethodNotAllowed},
		{"a discovery write", http.MethodPost, base, user, proxy, metav1.StatusReasonMethodNotAllowed},
		{"another path", http.MethodGet, srv.URL + "/apis/other.example/v1", user, proxy, metav1.StatusReasonNotFound},
		{"a bad tail", http.MethodGet, base + "/namespaces/a/workflowrunlogs/r?tail=0", user, proxy, metav1.StatusReasonBadRequest},
	} {
		if st := status(c.method, c.url, c.header, c.client); st.Reason != c.want {
			t.Errorf("%s: reason %s, want %s (%s)", c.what, st.Reason, c.want, st.Message)
		}
	}
}
