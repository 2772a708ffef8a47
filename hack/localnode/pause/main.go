// Command pause is the pod sandbox ("pause") process of the local node
// (hack/localnode.sh): it holds a pod's namespaces until it is told to stop.
// No registry is reachable, so the node's sandbox image is this program
// built statically into a FROM scratch image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
