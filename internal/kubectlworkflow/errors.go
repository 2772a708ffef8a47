package kubectlworkflow

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ExitError is an error that ends the process with Code rather than 1, such
// as a watched run that failed.
type ExitError struct {
	// Code is the process's exit code.
	Code int
	// Err says why; it is printed to stderr.
	Err error
}

// Error returns the message of the wrapped error.
func (e *ExitError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *ExitError) Unwrap() error { return e.Err }

// usageError is a command line the command cannot run: a wrong flag or
// argument count. Its report points at the command's help.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// usagef returns a usageError with the formatted message.
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exactArgs is cobra.ExactArgs with the argument names in its message.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch {
		case len(names) == 0 && len(args) > 0:
			return usagef("accepts no arguments; got %d (%s)", len(args), strings.Join(args, " "))
		case len(args) != len(names):
			return usagef("expected %d argument(s), %s; got %d", len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

// reportError writes err to w as kubectl would (an API server's refusal as
// "Error from server (Reason): ...", anything else as "error: ...") and
// returns the exit code.
func reportError(w io.Writer, cmd *cobra.Command, err error) int {
	code := 1
	var exit *ExitError
	if errors.As(err, &exit) {
		code = exit.Code
	}
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &status) && status.Status().Reason != "":
		fmt.Fprintf(w, "Error from server (%s): %v\n", status.Status().Reason, err)
	default:
		fmt.Fprintf(w, "error: %v\n", err)
	}
	if errors.As(err, new(usageError)) && cmd != nil {
		fmt.Fprintf(w, "See '%s -h' for help and examples.\n", cmd.CommandPath())
	}
	return code
}
