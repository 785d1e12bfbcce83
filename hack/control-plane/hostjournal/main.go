// Command hostjournal makes, journals and undoes the host changes of the node
// plane (scripts/control-plane-node.sh): the bridge, its route, the guard
// rule, sysctls, and what the node's processes make on the host (iptables
// chains, nftables tables, mounts, cgroups, directories). Every change is
// journaled before it is made; `undo` reverses exactly what the journal lists,
// last first (see Undo for what "exactly" means for each kind).
//
//	hostjournal -journal FILE dirs -owned STATE [-made FILE]... PATH...
//	                                                      journal PATHs absent now (and mounts under them)
//	hostjournal -journal FILE mounts PATH...              journal the mounts under PATHs now
//	hostjournal -journal FILE cgroups ROOT PREFIX         journal ROOT's PREFIX* cgroups now
//	hostjournal -journal FILE nft-tables FAMILY/TABLE...  journal nftables tables absent now
//	hostjournal -journal FILE iptables-chains PREFIX TABLE...  journal the tables' chains now
//	hostjournal -journal FILE sysctl KEY=VALUE...         journal, then set
//	hostjournal -journal FILE bridge NAME ADDR/LEN        journal, then create (if absent), address, up
//	hostjournal -journal FILE route DST DEV               journal, then route DST to DEV
//	hostjournal -journal FILE iptables-rule FAMILY TABLE CHAIN ARG...  journal, then insert
//	hostjournal -journal FILE containers ADDRESS ID...    journal the node's container ids (for undo)
//	hostjournal -journal FILE has bridge NAME             exit 0 if this journal made the bridge
//	hostjournal -journal FILE show                        the entries, one a line
//	hostjournal -journal FILE undo                        undo, last first; exit 3 if some were left
//
// Only the standard library: it builds offline, from no module cache at all.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], realHost{}))
}

func usage() int {
	fmt.Fprintln(os.Stderr, "usage: hostjournal -journal FILE dirs|mounts|cgroups|nft-tables|iptables-chains|sysctl|bridge|route|iptables-rule|containers|has|show|undo ARGS...")
	return 2
}

func run(args []string, host Host) int {
	fl := flag.NewFlagSet("hostjournal", flag.ContinueOnError)
	journal := fl.String("journal", "", "the journal file")
	if err := fl.Parse(args); err != nil || *journal == "" || fl.NArg() == 0 {
		return usage()
	}
	j, err := Load(*journal)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hostjournal: %v\n", err)
		return 1
	}
	n := &Node{J: j, Host: host, Log: func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "hostjournal: "+format+"\n", a...)
	}}
	verb, rest := fl.Arg(0), fl.Args()[1:]
	if err := dispatch(n, verb, rest); err != nil {
		if err == errUsage {
			return usage()
		}
		if err == errLeft {
			return 3
		}
		if err == errNo {
			return 1
		}
		fmt.Fprintf(os.Stderr, "hostjournal: %s: %v\n", verb, err)
		return 1
	}
	return 0
}

type cliError string

func (e cliError) Error() string { return string(e) }

const (
	errUsage = cliError("usage")
	errLeft  = cliError("some changes were left in place")
	errNo    = cliError("no")
)

func dispatch(n *Node, verb string, a []string) error {
	switch verb {
	case "dirs":
		if len(a) < 2 || a[0] != "-owned" {
			return errUsage
		}
		owned, rest := a[1], a[2:]
		var made []string
		for len(rest) >= 2 && rest[0] == "-made" {
			made, rest = append(made, rest[1]), rest[2:]
		}
		return n.Dirs(owned, made, rest...)
	case "mounts":
		return n.Mounts(a...)
	case "cgroups":
		if len(a) != 2 {
			return errUsage
		}
		return n.Cgroups(a[0], a[1])
	case "nft-tables":
		return n.NftTables(a...)
	case "iptables-chains":
		if len(a) < 2 {
			return errUsage
		}
		return n.Chains(a[0], a[1:]...)
	case "sysctl":
		for _, kv := range a {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return errUsage
			}
			if err := n.Sysctl(k, v); err != nil {
				return err
			}
		}
		return nil
	case "bridge":
		if len(a) != 2 {
			return errUsage
		}
		return n.Bridge(a[0], a[1])
	case "route":
		if len(a) != 2 {
			return errUsage
		}
		return n.Route(a[0], a[1])
	case "iptables-rule":
		if len(a) < 4 || (a[0] != "ip" && a[0] != "ip6") {
			return errUsage
		}
		return n.Rule(a[0], a[1], a[2], a[3:])
	case "containers":
		if len(a) < 1 {
			return errUsage
		}
		return n.Containers(a[0], a[1:]...)
	case "has":
		if len(a) != 2 || a[0] != KindBridge {
			return errUsage
		}
		if n.J.Has(Entry{Kind: KindBridge, Name: a[1]}) {
			return nil
		}
		return errNo
	case "show":
		for _, e := range n.J.Entries {
			fmt.Println(e)
		}
		return nil
	case "undo":
		if len(n.Undo()) > 0 {
			return errLeft
		}
		return nil
	}
	return errUsage
}
