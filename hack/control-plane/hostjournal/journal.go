package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// The kinds of host change a node plane makes, one entry each in the journal.
// An entry is appended (and synced) before the change it describes is made, so
// that `undo` also reverses a change an interrupted `up` may have half made;
// every undo step therefore accepts that its change is absent.
const (
	// KindDir: a host directory that did not exist before `up`, which the node's
	// processes (kubelet, containerd, CNI) may create. Undo removes what they
	// left there (see undoDir), never a file it cannot tell is theirs. Made
	// lists files under it at paths the node's processes hard-code (the
	// kubelet's device plugin socket): made by nobody else.
	KindDir = "dir"
	// KindMounts: mount points that appear at or under Path after `up` are the
	// node's (network namespaces, container root filesystems, pod volumes);
	// Existing lists those that were there before and are never unmounted.
	KindMounts = "mounts"
	// KindCgroups: directories named Prefix* within three levels of Path (the
	// kubelet's pod cgroups); Existing lists those there before.
	KindCgroups = "cgroups"
	// KindNftTable: an nftables table (Family, Table) absent before `up`, which
	// iptables-nft creates when first asked about it.
	KindNftTable = "nft-table"
	// KindChains: the chains of an iptables table (Family, Table) before `up`.
	// Chains named Prefix* that appear later were made by the processes `up`
	// started (kube-proxy, the kubelet); only those are removed.
	KindChains = "iptables-chains"
	// KindSysctl: a kernel setting `up` set to Set; Before is its value then.
	KindSysctl = "sysctl"
	// KindBridge: the bridge `up` created (Name, with Addr).
	KindBridge = "bridge"
	// KindRoute: a route `up` added (Dst through Dev).
	KindRoute = "route"
	// KindRule: an iptables rule `up` inserted (Family, Table, Chain, Rule).
	KindRule = "iptables-rule"
	// KindContainers: not a change but what undo needs to know to tell the
	// node's files from others': the ids (Existing) of the containers and pod
	// sandboxes of the node's containerd (listening on Path), journaled by
	// `down` while it still runs. A file named after one of them in a
	// journaled directory (a CNI result cache, a runc state directory, a shim
	// socket) is the node's.
	KindContainers = "containers"
)

// Entry is one host change. Which fields are set depends on Kind.
type Entry struct {
	Kind     string   `json:"kind"`
	Path     string   `json:"path,omitempty"`
	Owned    string   `json:"owned,omitempty"`
	Made     []string `json:"made,omitempty"`
	Existing []string `json:"existing,omitempty"`
	Prefix   string   `json:"prefix,omitempty"`
	Family   string   `json:"family,omitempty"`
	Table    string   `json:"table,omitempty"`
	Chain    string   `json:"chain,omitempty"`
	Rule     []string `json:"rule,omitempty"`
	Key      string   `json:"key,omitempty"`
	Before   string   `json:"before,omitempty"`
	Set      string   `json:"set,omitempty"`
	Name     string   `json:"name,omitempty"`
	Addr     string   `json:"addr,omitempty"`
	Dst      string   `json:"dst,omitempty"`
	Dev      string   `json:"dev,omitempty"`
}

// identity is what makes two entries the same change: a change already in the
// journal is not recorded again (a second `up` on the same plane must not take
// a new "before" that already includes the node's own changes).
func (e Entry) identity() string {
	switch e.Kind {
	case KindDir, KindMounts, KindCgroups:
		return e.Kind + " " + e.Path
	case KindNftTable, KindChains:
		return e.Kind + " " + e.Family + " " + e.Table
	case KindSysctl:
		// A second setting of the same key to another value is a new change,
		// whose Before is the first one's Set: undone in reverse, both unwind.
		return e.Kind + " " + e.Key + "=" + e.Set
	case KindBridge:
		return e.Kind + " " + e.Name
	case KindRoute:
		return e.Kind + " " + e.Dst
	case KindRule:
		return e.Kind + " " + e.Family + " " + e.Table + " " + e.Chain + " " + strings.Join(e.Rule, "\x00")
	case KindContainers:
		return e.Kind + " " + e.Path + " " + strings.Join(e.Existing, " ")
	}
	return e.Kind
}

// String is how reports name an entry.
func (e Entry) String() string {
	switch e.Kind {
	case KindDir, KindMounts, KindCgroups:
		return e.Kind + " " + e.Path
	case KindNftTable, KindChains:
		return e.Kind + " " + e.Family + " " + e.Table
	case KindSysctl:
		return fmt.Sprintf("sysctl %s (was %s, set %s)", e.Key, e.Before, e.Set)
	case KindBridge:
		return "bridge " + e.Name
	case KindRoute:
		return "route " + e.Dst + " dev " + e.Dev
	case KindRule:
		return fmt.Sprintf("%s rule -t %s -A %s %s", e.Family, e.Table, e.Chain, strings.Join(e.Rule, " "))
	case KindContainers:
		return fmt.Sprintf("containers of %s: %d", e.Path, len(e.Existing))
	}
	return e.Kind
}

// Journal is the file of entries, one JSON object a line, in the order the
// changes were made.
type Journal struct {
	Path    string
	Entries []Entry
}

// Load reads the journal; a missing file is an empty journal. A line that does
// not parse is an error: undo must not guess what a damaged journal meant.
func Load(path string) (*Journal, error) {
	j := &Journal{Path: path}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return j, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" {
			continue
		}
		var e Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, n, err)
		}
		j.Entries = append(j.Entries, e)
	}
	return j, s.Err()
}

// Has reports whether a change with e's identity is journaled.
func (j *Journal) Has(e Entry) bool {
	id := e.identity()
	for _, x := range j.Entries {
		if x.identity() == id {
			return true
		}
	}
	return false
}

// Record appends e, synced to disk, unless a change with its identity is
// already there; it reports whether e was appended.
func (j *Journal) Record(e Entry) (bool, error) {
	if j.Has(e) {
		return false, nil
	}
	line, err := json.Marshal(e)
	if err != nil {
		return false, err
	}
	if j.Path != "" {
		f, err := os.OpenFile(j.Path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return false, err
		}
		if _, err := f.Write(append(line, '\n')); err != nil {
			f.Close()
			return false, err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return false, err
		}
		if err := f.Close(); err != nil {
			return false, err
		}
	}
	j.Entries = append(j.Entries, e)
	return true, nil
}
