package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"testing"
)

// A password in DATABASE_URL is never printed by -help (which prints every
// flag's default), and the environment still supplies the URL.
func TestHelpDoesNotPrintTheDatabaseURL(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://app:s3cret@db/app")
	o, err := parseFlags(nil)
	if err != nil || o.databaseURL != "postgres://app:s3cret@db/app" {
		t.Fatalf("the environment's URL was not used: %q %v", o.databaseURL, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	_, perr := parseFlags([]string{"-help"})
	os.Stderr = stderr
	_ = w.Close()
	help, _ := io.ReadAll(r)
	if !errors.Is(perr, flag.ErrHelp) || !strings.Contains(string(help), "database-url") {
		t.Fatalf("-help: %v\n%s", perr, help)
	}
	if strings.Contains(string(help), "s3cret") {
		t.Fatalf("-help printed the password:\n%s", help)
	}
}

// -version needs no database: it is how an image's worker says its build.
func TestVersionNeedsNoDatabase(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	o, err := parseFlags([]string{"-version"})
	if err != nil || !o.printVersion {
		t.Fatalf("-version: %+v %v", o, err)
	}
}

// A malformed environment value is refused with the variable's name rather
// than silently replaced by the default (a Python-style LEASE_DURATION=30
// would otherwise leave the Go worker at its default lease); an empty one
// counts as unset; flags still win.
func TestMalformedEnvironmentIsAnError(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	for key, value := range map[string]string{
		"LEASE_DURATION": "30", "CONCURRENCY": "many", "MIGRATE": "sure", "REAP_INTERVAL": "5 s",
	} {
		_, err := parseFlagsEnv(nil, env(map[string]string{"DATABASE_URL": "postgres://x", key: value}))
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%q: got %v, want an error naming the variable", key, value, err)
		}
	}
	o, err := parseFlagsEnv([]string{"-concurrency=3"}, env(map[string]string{
		"DATABASE_URL": "postgres://x", "LEASE_DURATION": "45s", "CONCURRENCY": "7", "MIGRATE": ""}))
	if err != nil || o.leaseDuration.String() != "45s" || o.concurrency != 3 || o.migrate {
		t.Fatalf("well-formed values: %+v %v", o, err)
	}
}

// The worker serves the namespace of NAMESPACE (the chart sets it from the
// pod's own namespace), -namespace over it, else default.
func TestNamespaceFromFlagOrEnvironment(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, map[string]string{"DATABASE_URL": "postgres://x"}, "default"},
		{nil, map[string]string{"DATABASE_URL": "postgres://x", "NAMESPACE": "payments"}, "payments"},
		{[]string{"-namespace=shop"}, map[string]string{"DATABASE_URL": "postgres://x", "NAMESPACE": "payments"}, "shop"},
	} {
		o, err := parseFlagsEnv(c.args, env(c.env))
		if err != nil || o.namespace != c.want {
			t.Errorf("%v with %v: namespace %q (%v), want %q", c.args, c.env, o.namespace, err, c.want)
		}
	}
}
