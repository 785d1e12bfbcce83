// Command etcd is the etcd server, built from its published Go module so the
// test control plane needs no downloaded release binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
