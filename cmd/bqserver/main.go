// Command bqserver runs a bq lock server, makes a cluster's keys and
// certificates, or runs a whole local cluster for development.
//
//	bqserver init --dir DIR --servers N [--f F] [--host H] [--port-base P] [--scheme S]
//	bqserver run  --dir DIR --id I
//	bqserver dev  [--dir DIR] [--servers 4]
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `bqserver: the bq lock server

Usage:
  bqserver init --dir DIR --servers N [--f F] [--host H] [--port-base P] [--scheme S]
        make a cluster: CA, per-server TLS certificates and signing keys, DIR/cluster.yaml
  bqserver run --dir DIR --id I [--metrics ADDR] [--log-level L] [--log-format text|json]
        run server I of the cluster in DIR until SIGINT or SIGTERM
  bqserver dev [--dir DIR] [--servers 4]
        run a whole local cluster in one process (makes one in DIR if it has none)

Run 'bqserver COMMAND -h' for a command's flags.
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "init":
		return runInit(args[1:], stdout, stderr)
	case "run":
		return runServer(args[1:], stdout, stderr)
	case "dev":
		return runDev(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "bqserver: unknown command %q\n\n%s", args[0], usage)
	return 2
}
