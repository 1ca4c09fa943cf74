// Command pause is the sandbox ("pause") container of Nezha's local cluster: it holds the pod's
// namespaces open, reaps zombies when it is PID 1 of a shared PID namespace, and exits cleanly
// on SIGINT/SIGTERM. Built static (CGO_ENABLED=0) and packed by hack/imagebuilder, so the cluster
// needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
