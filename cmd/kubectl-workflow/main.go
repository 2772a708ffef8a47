// Command kubectl-workflow is the kubectl workflow plugin: kubectl runs it
// for `kubectl workflow ...` once it is on the PATH. See
// docs/kubectl-plugin.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/simple-workflow/simple-workflow/internal/kubectlworkflow"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := kubectlworkflow.Main(ctx, os.Args[1:], kubectlworkflow.IOStreams{Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	os.Exit(code)
}
