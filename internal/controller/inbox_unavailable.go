package controller

import (
	"errors"
	"fmt"
)

// InboxUnavailableError says that the inbox of a namespace cannot be used
// now: it is not connected, its database does not answer, or the
// namespace is between inboxes.
type InboxUnavailableError struct {
	// Inbox is the inbox's name (DefaultInboxName for the default one).
	Inbox string
	// Namespace is the namespace asked for.
	Namespace string
	// Reason is ReasonInboxUnavailable or ReasonNamespaceNotYetPlaced.
	Reason string
	// Err is the cause, when known.
	Err error
	// Brief marks a state that passes in moments (the manager starting,
	// a namespace moving): the object is looked at again soon and not
	// marked.
	Brief bool
}

func (e *InboxUnavailableError) Error() string {
	msg := fmt.Sprintf("inbox %s of namespace %s is unavailable", e.Inbox, e.Namespace)
	if e.Reason == reasonNotYetPlaced {
		msg = fmt.Sprintf("namespace %s is not yet placed in inbox %s", e.Namespace, e.Inbox)
	}
	if e.Err != nil {
		return msg + ": " + e.Err.Error()
	}
	return msg
}

func (e *InboxUnavailableError) Unwrap() error { return e.Err }

// asInboxUnavailable returns the *InboxUnavailableError in err's chain.
func asInboxUnavailable(err error) (*InboxUnavailableError, bool) {
	var u *InboxUnavailableError
	ok := errors.As(err, &u)
	return u, ok
}
