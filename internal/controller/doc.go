// Package controller holds the reconcilers: WorkflowRun (mirrors each object
// into the inbox and writes the run's progress back to its status) and
// WorkflowRegistry (mirrors declared workflow types into the registry table).
// They reach the inbox through the narrow Inbox interface.
package controller
