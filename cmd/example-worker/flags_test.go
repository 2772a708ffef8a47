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
