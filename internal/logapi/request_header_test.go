package logapi

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"reflect"
	"testing"

	"github.com/simple-workflow/simple-workflow/internal/devenv"
)

// configMap returns the data kube-apiserver publishes in
// extension-apiserver-authentication for a front proxy CA.
func configMap(t *testing.T, ca *x509.Certificate) map[string]string {
	t.Helper()
	return map[string]string{
		"client-ca-file":                     "ignored",
		keyClientCA:                          string(devenv.CertPEM(ca)),
		keyAllowedNames:                      `["front-proxy-client"]`,
		keyUsername:                          `["X-Remote-User"]`,
		keyUID:                               `["X-Remote-Uid"]`,
		keyGroup:                             `["X-Remote-Group"]`,
		keyExtraPrefixes:                     `["X-Remote-Extra-"]`,
		"requestheader-unknown-future-field": `whatever`,
	}
}

// sign returns a certificate for name and usage signed by ca.
func sign(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, usage x509.ExtKeyUsage) []*x509.Certificate {
	t.Helper()
	c, _, err := devenv.SignCert(ca, caKey, name, nil, usage)
	if err != nil {
		t.Fatal(err)
	}
	return []*x509.Certificate{c}
}

func TestRequestHeaderVerifiesTheAPIServersCertificate(t *testing.T) {
	ca, caKey, err := devenv.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, otherKey, err := devenv.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	rh, err := parseRequestHeader(configMap(t, ca))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		peers []*x509.Certificate
		want  bool
	}{
		"the API server's":          {sign(t, ca, caKey, "front-proxy-client", x509.ExtKeyUsageClientAuth), true},
		"another name":              {sign(t, ca, caKey, "someone", x509.ExtKeyUsageClientAuth), false},
		"another CA":                {sign(t, other, otherKey, "front-proxy-client", x509.ExtKeyUsageClientAuth), false},
		"a serving certificate":     {sign(t, ca, caKey, "front-proxy-client", x509.ExtKeyUsageServerAuth), false},
		"no certificate":            {nil, false},
		"the CA itself as a client": {[]*x509.Certificate{ca}, false},
	} {
		r := &http.Request{TLS: &tls.ConnectionState{PeerCertificates: tc.peers}}
		if got := rh.verified(r); got != tc.want {
			t.Errorf("%s: verified %v, want %v", name, got, tc.want)
		}
	}
	if (&requestHeader{roots: rh.roots}).verified(&http.Request{}) {
		t.Error("a request without TLS was verified")
	}
	// No allowed names: any certificate of the CA.
	open := *rh
	open.allowedNames = nil
	if !open.verified(&http.Request{TLS: &tls.ConnectionState{PeerCertificates: sign(t, ca, caKey, "someone", x509.ExtKeyUsageClientAuth)}}) {
		t.Error("without allowed names, a certificate of the CA was refused")
	}
}

func TestRequestHeaderUser(t *testing.T) {
	ca, _, err := devenv.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	rh, err := parseRequestHeader(configMap(t, ca))
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("X-Remote-User", "alice")
	h.Set("X-Remote-Uid", "42")
	h.Add("X-Remote-Group", "devs")
	h.Add("X-Remote-Group", "system:authenticated")
	h.Add("x-remote-extra-scopes", "a")
	h.Add("X-Remote-Extra-Scopes", "b")
	h.Add("X-Remote-Extra-Example.com%2fteam", "shop")
	got := rh.user(h)
	want := User{Name: "alice", UID: "42", Groups: []string{"devs", "system:authenticated"},
		Extra: map[string][]string{"scopes": {"a", "b"}, "example.com/team": {"shop"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("user: got %+v, want %+v", got, want)
	}
	if u := rh.user(http.Header{}); u.Name != "" || u.Groups != nil || u.Extra != nil {
		t.Errorf("no headers: %+v", u)
	}
}

func TestParseRequestHeaderRefusesWhatCannotAuthenticate(t *testing.T) {
	ca, _, err := devenv.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(map[string]string){
		"no CA":                   func(d map[string]string) { delete(d, keyClientCA) },
		"a CA that is not PEM":    func(d map[string]string) { d[keyClientCA] = "nope" },
		"no user header":          func(d map[string]string) { delete(d, keyUsername) },
		"a list that is not JSON": func(d map[string]string) { d[keyGroup] = "X-Remote-Group" },
	} {
		d := configMap(t, ca)
		change(d)
		if _, err := parseRequestHeader(d); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
