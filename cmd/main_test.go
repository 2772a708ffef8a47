package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/controller"
)

func envMap(m map[string]string) lookupEnv {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestFlagsFallBackToEnvironment(t *testing.T) {
	o, err := parseFlags(nil, envMap(map[string]string{
		"DATABASE_URL": "postgres://env", "KUBE_API_QPS": "50", "KUBE_API_BURST": "70",
		"LEADER_ELECT": "true", "RETENTION": "2h", "SKIP_MIGRATIONS": "true", "CREATE_DATABASE_ROLES": "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if o.databaseURL != "postgres://env" || o.kubeAPIQPS != 50 || o.kubeAPIBurst != 70 || !o.leaderElect ||
		o.retention != 2*time.Hour || !o.skipMigrations || !o.createDatabaseRoles {
		t.Fatalf("environment not applied: %+v", o)
	}
	o, err = parseFlags([]string{"--database-url", "postgres://flag", "--kube-api-qps", "10"}, envMap(map[string]string{"DATABASE_URL": "postgres://env"}))
	if err != nil || o.databaseURL != "postgres://flag" || o.kubeAPIQPS != 10 {
		t.Fatalf("flags must win over the environment: %+v %v", o, err)
	}
}

func TestDefaultsAreAboveClientGo(t *testing.T) {
	o, err := parseFlags([]string{"--database-url", "x"}, envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if o.kubeAPIQPS <= 20 || o.kubeAPIBurst <= 30 {
		t.Fatalf("qps %v burst %d, want well above client-go's 20/30", o.kubeAPIQPS, o.kubeAPIBurst)
	}
}

func TestDatabaseURLFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "url")
	if err := os.WriteFile(f, []byte("postgres://from-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--database-url-file", f}, envMap(nil))
	if err != nil || o.databaseURL != "postgres://from-secret" {
		t.Fatalf("url file: %+v %v", o, err)
	}
	if _, err := parseFlags(nil, envMap(nil)); err == nil {
		t.Fatal("no database URL must be an error")
	}
	if _, err := parseFlags([]string{"--database-url-file", filepath.Join(t.TempDir(), "missing")}, envMap(nil)); err == nil {
		t.Fatal("a missing URL file must be an error")
	}
}

// The deletion grace period is a flag with an
// environment fallback.
func TestDeletionGracePeriod(t *testing.T) {
	o, err := parseFlags([]string{"--database-url", "x"}, envMap(nil))
	if err != nil || o.deletionGracePeriod != controller.DefaultDeletionGracePeriod {
		t.Fatalf("default: %v %v", o.deletionGracePeriod, err)
	}
	o, err = parseFlags([]string{"--database-url", "x"}, envMap(map[string]string{"DELETION_GRACE_PERIOD": "3m"}))
	if err != nil || o.deletionGracePeriod != 3*time.Minute {
		t.Fatalf("environment: %v %v", o.deletionGracePeriod, err)
	}
	o, err = parseFlags([]string{"--database-url", "x", "--deletion-grace-period", "30s"}, envMap(map[string]string{"DELETION_GRACE_PERIOD": "3m"}))
	if err != nil || o.deletionGracePeriod != 30*time.Second {
		t.Fatalf("flag over environment: %v %v", o.deletionGracePeriod, err)
	}
	if _, err := parseFlags([]string{"--database-url", "x", "--deletion-grace-period", "0s"}, envMap(nil)); err == nil {
		t.Fatal("a zero grace period must be an error")
	}
}

// A password in DATABASE_URL is never printed by --help (which prints every
// flag's default).
func TestHelpDoesNotPrintTheDatabaseURL(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	_, perr := parseFlags([]string{"--help"}, envMap(map[string]string{"DATABASE_URL": "postgres://app:s3cret@db/app"}))
	os.Stderr = stderr
	_ = w.Close()
	help, _ := io.ReadAll(r)
	if !errors.Is(perr, flag.ErrHelp) || !strings.Contains(string(help), "database-url") {
		t.Fatalf("--help: %v\n%s", perr, help)
	}
	if strings.Contains(string(help), "s3cret") {
		t.Fatalf("--help printed the password:\n%s", help)
	}
}

// The manager takes --kubeconfig like every controller-runtime manager, and
// says which file it could not load.
func TestKubeconfigFlag(t *testing.T) {
	o, err := parseFlags([]string{"--kubeconfig=/nowhere/kubeconfig"}, envMap(map[string]string{"DATABASE_URL": "postgres://x"}))
	if err != nil || o.kubeconfig != "/nowhere/kubeconfig" {
		t.Fatalf("--kubeconfig not taken: %+v %v", o, err)
	}
	if _, err := restConfig(o.kubeconfig); err == nil || !strings.Contains(err.Error(), "/nowhere/kubeconfig") {
		t.Fatalf("a missing kubeconfig must be named in the error: %v", err)
	}
	o, err = parseFlags(nil, envMap(map[string]string{"DATABASE_URL": "postgres://x", "KUBECONFIG": "/env/kubeconfig"}))
	if err != nil || o.kubeconfig != "/env/kubeconfig" {
		t.Fatalf("KUBECONFIG not taken: %+v %v", o, err)
	}
}

// --version answers without a database URL.
func TestVersionFlagNeedsNoDatabase(t *testing.T) {
	o, err := parseFlags([]string{"--version"}, envMap(map[string]string{}))
	if err != nil || !o.printVersion {
		t.Fatalf("--version: %+v %v", o, err)
	}
}

// The console is off unless an address is given, and reads as
// workflow_reader unless told otherwise.
func TestConsoleFlags(t *testing.T) {
	o, err := parseFlags(nil, envMap(map[string]string{"DATABASE_URL": "postgres://x"}))
	if err != nil || o.consoleAddr != "" || o.consoleDatabaseRole != "workflow_reader" || o.consoleDatabaseURL != "" {
		t.Fatalf("console defaults: %+v %v", o, err)
	}
	o, err = parseFlags([]string{"--console-bind-address=:8082", "--console-database-role=", "--console-allowed-hosts=a.example, b.example"}, envMap(map[string]string{
		"DATABASE_URL": "postgres://x", "CONSOLE_DATABASE_URL": "postgres://reader"}))
	if err != nil || o.consoleAddr != ":8082" || o.consoleDatabaseRole != "" || o.consoleDatabaseURL != "postgres://reader" ||
		o.consoleAllowedHosts != "a.example, b.example" {
		t.Fatalf("console flags not taken: %+v %v", o, err)
	}
}

func TestLogAPIFlags(t *testing.T) {
	o, err := parseFlags(nil, envMap(map[string]string{"DATABASE_URL": "postgres://x"}))
	if err != nil || o.logAPIAddr != "" || o.logAPICertDir != "" {
		t.Fatalf("the log API is off by default: %+v %v", o, err)
	}
	o, err = parseFlags([]string{"--log-api-bind-address=:8443"}, envMap(map[string]string{
		"DATABASE_URL": "postgres://x", "LOG_API_CERT_DIR": "/etc/simple-workflow/log-api"}))
	if err != nil || o.logAPIAddr != ":8443" || o.logAPICertDir != "/etc/simple-workflow/log-api" {
		t.Fatalf("log API flags not taken: %+v %v", o, err)
	}
	_, err = parseFlags([]string{"--log-api-bind-address=:8443"}, envMap(map[string]string{"DATABASE_URL": "postgres://x"}))
	if err == nil || !strings.Contains(err.Error(), "--log-api-cert-dir") {
		t.Fatalf("a log API without a certificate was accepted: %v", err)
	}
}
