package controller

import (
	"context"
	"errors"
	"fmt"
)

// InboxRouter finds the inbox that serves a namespace. *InboxSet
// implements it; a reconciler without one uses its single Inbox.
type InboxRouter interface {
	// Enter returns the inbox serving namespace and its name for one
	// reconcile's pass, with a release to call when the pass ends, or an
	// error (an *InboxUnavailableError when the manager cannot use it now).
	Enter(ctx context.Context, namespace string) (Inbox, string, func(), error)
}

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

// singleInbox routes every namespace to one inbox.
type singleInbox struct{ inbox Inbox }

func (s singleInbox) Enter(context.Context, string) (Inbox, string, func(), error) {
	return s.inbox, defaultInbox, func() {}, nil
}

// routerOr returns r, or a router of the single inbox when r is nil.
func routerOr(r InboxRouter, single Inbox) InboxRouter {
	if r != nil {
		return r
	}
	return singleInbox{inbox: single}
}
