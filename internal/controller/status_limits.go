package controller

// Status limits.
const (
	// MaxResultBytes is the largest result copied into status.result.
	MaxResultBytes = 16 * 1024
	// MaxLastErrorBytes is the length status.lastError is truncated to.
	MaxLastErrorBytes = 1024
	// MaxChildrenInStatus is how many child runs status.children lists.
	MaxChildrenInStatus = 20
	// MaxStepErrorBytes is the length a step's error in status.dagSteps is
	// truncated to (a DAG has up to 100 steps).
	MaxStepErrorBytes = 256
)
