package devenv

import (
	"fmt"
	"os"
	"strings"
)

// Alive reports whether the process with this pid still runs: it exists
// and is neither a zombie nor dead (as /proc/<pid>/stat says).
func Alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}
