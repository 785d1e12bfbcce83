// Command pause is the pod sandbox image of the local node (containerd pins it
// as its sandbox image): it holds the pod's namespaces and exits on SIGTERM or
// SIGINT. Built here because no registry can be pulled from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
