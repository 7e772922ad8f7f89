// Command pause is the real node's sandbox image, in place of
// registry.k8s.io/pause (nothing can be pulled here): it holds a pod's
// namespaces and exits on SIGTERM or SIGINT, as the kubelet expects when it
// stops a pod sandbox.
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
