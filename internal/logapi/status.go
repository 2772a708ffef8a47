package logapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	logsv1alpha1 "github.com/simple-workflow/simple-workflow/internal/logapi/v1alpha1"
)

// logsResource is workflowrunlogs.logs.simpleworkflow.dev, as errors name it.
var logsResource = schema.GroupResource{Group: logsv1alpha1.Group, Resource: logsv1alpha1.Resource}

// writeJSON writes obj as the response's JSON body with the status code.
func writeJSON(w http.ResponseWriter, code int, obj any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(obj)
}

// writeStatus writes err as a Kubernetes Status object, with its code; an
// error that is not an API status is an internal error.
func writeStatus(w http.ResponseWriter, err error) {
	var status apierrors.APIStatus
	var st metav1.Status
	if errors.As(err, &status) {
		st = status.Status()
	} else {
		st = apierrors.NewInternalError(err).ErrStatus
	}
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	writeJSON(w, int(st.Code), st)
}

// notFound is a 404 for the log of WorkflowRun name, with msg as its message.
func notFound(name, msg string) error {
	err := apierrors.NewNotFound(logsResource, name)
	err.ErrStatus.Message = msg
	return err
}

// badRequest is a 400 with the formatted message.
func badRequest(format string, args ...any) error {
	return apierrors.NewBadRequest(fmt.Sprintf(format, args...))
}

// unavailable is a 503 with the formatted message.
func unavailable(format string, args ...any) error {
	return apierrors.NewServiceUnavailable(fmt.Sprintf(format, args...))
}
