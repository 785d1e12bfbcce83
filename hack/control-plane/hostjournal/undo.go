package main

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// Undo reverses every journaled change, the last one first, each exactly as
// far as it can tell the change is still the node's:
//
//   - a sysctl is restored only while it still has the value `up` set (another
//     value means someone changed it since: left alone, reported);
//   - a directory (absent before `up`) loses only what the node's processes
//     made there: empty directories, symlinks into the plane's state, files
//     at the paths they hard-code (Made), and what is named after one of the
//     node's containers (see KindContainers);
//     anything else was made by someone else, and stays with the directories
//     that hold it (reported);
//   - iptables chains go only if named with the journaled prefix (KUBE-) and
//     absent before `up` (created by the kube-proxy and kubelet `up`
//     started), with the rules elsewhere that jump to them; chains that were
//     there before, and every other rule, stay;
//   - an nftables table absent before `up` goes only if its listing parses
//     and it holds nothing but empty built-in chains;
//   - only mounts and cgroups that appeared after `up` are unmounted/removed.
//
// Undo goes on past a step it cannot do; it returns what it left in place.
func (n *Node) Undo() []string {
	var left []string
	for i := len(n.J.Entries) - 1; i >= 0; i-- {
		e := n.J.Entries[i]
		var l []string
		switch e.Kind {
		case KindRule:
			l = n.undoRule(e)
		case KindRoute:
			l = n.undoRoute(e)
		case KindBridge:
			l = n.undoBridge(e)
		case KindSysctl:
			l = n.undoSysctl(e)
		case KindChains:
			l = n.undoChains(e)
		case KindNftTable:
			l = n.undoNftTable(e)
		case KindCgroups:
			l = n.undoCgroups(e)
		case KindMounts:
			l = n.undoMounts(e)
		case KindDir:
			l = n.undoDir(e)
		case KindContainers:
			// Knowledge for undoDir, nothing to undo.
		default:
			l = []string{fmt.Sprintf("%s: unknown kind of change, left alone", e.Kind)}
		}
		for _, x := range l {
			n.logf("left: %s", x)
		}
		left = append(left, l...)
	}
	return left
}

func (n *Node) undoRule(e Entry) []string {
	cmd := iptablesCmd(e.Family)
	if !n.Host.Has(cmd) {
		return nil
	}
	if _, err := n.Host.Run(cmd, append([]string{"-t", e.Table, "-C", e.Chain}, e.Rule...)...); err != nil {
		return nil // not there (up stopped before inserting it, or gone)
	}
	if _, err := n.Host.Run(cmd, append([]string{"-t", e.Table, "-D", e.Chain}, e.Rule...)...); err != nil {
		return []string{fmt.Sprintf("%s: %v", e, err)}
	}
	return nil
}

func (n *Node) undoRoute(e Entry) []string {
	out, err := n.Host.Run("ip", "route", "show", "exact", e.Dst)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", e, err)}
	}
	if !strings.Contains(" "+out+" ", " dev "+e.Dev+" ") {
		return nil // gone (with its bridge), or someone else's now
	}
	if _, err := n.Host.Run("ip", "route", "del", e.Dst, "dev", e.Dev); err != nil {
		return []string{fmt.Sprintf("%s: %v", e, err)}
	}
	return nil
}

func (n *Node) undoBridge(e Entry) []string {
	if !n.linkExists(e.Name) {
		return nil
	}
	var left []string
	// The pods' veths (their other ends go with them).
	out, _ := n.Host.Run("ip", "-o", "link", "show", "master", e.Name)
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(line, ": ", 3)
		if len(f) < 2 {
			continue
		}
		port, _, _ := strings.Cut(f[1], "@")
		if _, err := n.Host.Run("ip", "link", "del", port); err != nil {
			left = append(left, fmt.Sprintf("veth %s of %s: %v", port, e, err))
		}
	}
	if _, err := n.Host.Run("ip", "link", "del", e.Name); err != nil {
		return append(left, fmt.Sprintf("%s: %v", e, err))
	}
	n.logf("removed bridge %s", e.Name)
	return left
}

func (n *Node) undoSysctl(e Entry) []string {
	cur, err := n.readSysctl(e.Key)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", e, err)}
	}
	switch {
	case cur == e.Before:
		return nil
	case cur != e.Set:
		return []string{fmt.Sprintf("%s: now %s, changed by someone else since up: left alone", e, cur)}
	}
	if err := n.Host.WriteFile(sysctlPath(e.Key), e.Before+"\n"); err != nil {
		return []string{fmt.Sprintf("%s: %v", e, err)}
	}
	return nil
}

func (n *Node) undoChains(e Entry) []string {
	cmd := iptablesCmd(e.Family)
	if !n.Host.Has(cmd) {
		return nil
	}
	out, err := n.Host.Run(cmd, "-t", e.Table, "-S")
	if err != nil {
		return []string{fmt.Sprintf("%s: cannot list: %v", e, err)}
	}
	l, err := parseListing(out)
	if err != nil {
		return []string{fmt.Sprintf("%s: listing not understood, table left alone: %v", e, err)}
	}
	before := map[string]bool{}
	for _, c := range e.Existing {
		before[c] = true
	}
	ours := map[string]bool{}
	var order []string
	for _, c := range l.User {
		if strings.HasPrefix(c, e.Prefix) && !before[c] {
			ours[c] = true
			order = append(order, c)
		}
	}
	if len(order) == 0 {
		return nil
	}
	var left []string
	// Rules elsewhere that jump to the node's chains, then the chains.
	for _, r := range l.Rules {
		if ours[r[1]] || !ours[jumpTarget(r)] {
			continue
		}
		if _, err := n.Host.Run(cmd, append([]string{"-t", e.Table, "-D"}, r[1:]...)...); err != nil {
			left = append(left, fmt.Sprintf("%s: rule %s: %v", e, strings.Join(r, " "), err))
		}
	}
	for _, c := range order {
		if _, err := n.Host.Run(cmd, "-t", e.Table, "-F", c); err != nil {
			left = append(left, fmt.Sprintf("%s: flush %s: %v", e, c, err))
		}
	}
	for _, c := range order {
		if _, err := n.Host.Run(cmd, "-t", e.Table, "-X", c); err != nil {
			left = append(left, fmt.Sprintf("%s: delete %s: %v", e, c, err))
		}
	}
	return left
}

// The chains iptables-nft makes in its tables: the only ones an empty table has.
var builtinChains = map[string]bool{"INPUT": true, "FORWARD": true, "OUTPUT": true, "PREROUTING": true, "POSTROUTING": true}

func (n *Node) undoNftTable(e Entry) []string {
	if !n.Host.Has("nft") {
		return []string{fmt.Sprintf("%s: nft is not installed", e)}
	}
	out, err := n.Host.Run("nft", "-j", "list", "table", e.Family, e.Table)
	if err != nil {
		if strings.Contains(err.Error(), "No such file or directory") {
			return nil
		}
		return []string{fmt.Sprintf("%s: cannot list, left alone: %v", e, err)}
	}
	var listing struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &listing); err != nil || listing.Nftables == nil {
		return []string{fmt.Sprintf("%s: listing did not parse, left alone (%v)", e, err)}
	}
	for _, obj := range listing.Nftables {
		for kind, raw := range obj {
			switch kind {
			case "metainfo", "table":
				continue
			case "chain":
				var c struct {
					Name string `json:"name"`
					Hook string `json:"hook"`
				}
				if err := json.Unmarshal(raw, &c); err != nil {
					return []string{fmt.Sprintf("%s: listing did not parse, left alone (%v)", e, err)}
				}
				if c.Hook != "" && builtinChains[c.Name] {
					continue
				}
				return []string{fmt.Sprintf("%s: holds chain %s, not the node's: left alone", e, c.Name)}
			default:
				return []string{fmt.Sprintf("%s: holds a %s, not the node's: left alone", e, kind)}
			}
		}
	}
	if _, err := n.Host.Run("nft", "delete", "table", e.Family, e.Table); err != nil {
		return []string{fmt.Sprintf("%s: %v", e, err)}
	}
	return nil
}

func (n *Node) undoCgroups(e Entry) []string {
	before := map[string]bool{}
	for _, c := range e.Existing {
		before[c] = true
	}
	var left []string
	for _, cg := range n.findCgroups(e.Path, e.Prefix) {
		if before[cg] {
			continue
		}
		if err := n.rmdirTree(cg); err != nil {
			left = append(left, fmt.Sprintf("cgroup %s: %v", cg, err))
		}
	}
	return left
}

// rmdirTree removes a tree of directories, leaves first, and nothing else
// (a cgroup's files go with its directory; a cgroup with processes stays).
func (n *Node) rmdirTree(dir string) error {
	es, err := n.Host.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, c := range es {
		if c.Dir && !c.Link {
			if err := n.rmdirTree(path.Join(dir, c.Name)); err != nil {
				return err
			}
		}
	}
	return n.Host.Remove(dir)
}

func (n *Node) undoMounts(e Entry) []string {
	before := map[string]bool{}
	for _, m := range e.Existing {
		before[m] = true
	}
	ours := func() []string {
		all, err := n.mountPoints()
		if err != nil {
			return nil
		}
		var out []string
		for _, m := range under(all, e.Path) {
			if !before[m] {
				out = append(out, m)
			}
		}
		return out
	}
	// Several passes: a mount can hide another at the same point, and
	// propagation can bring one back once.
	for pass := 0; pass < 3; pass++ {
		ms := ours()
		if len(ms) == 0 {
			return nil
		}
		for _, m := range ms {
			if _, err := n.Host.Run("umount", m); err != nil {
				n.Host.Run("umount", "-l", m)
			}
		}
	}
	var left []string
	for _, m := range ours() {
		left = append(left, fmt.Sprintf("mount %s (under %s): still mounted", m, e.Path))
	}
	return left
}

func (n *Node) undoDir(e Entry) []string {
	if !n.Host.Exists(e.Path) {
		return nil
	}
	var foreign []string
	names := n.ownedNames()
	for _, m := range e.Made {
		names[m] = true
	}
	empty := n.clean(e.Path, e.Owned, names, false, &foreign)
	if empty {
		if err := n.Host.Remove(e.Path); err != nil {
			return []string{fmt.Sprintf("%s: %v", e, err)}
		}
		return nil
	}
	shown := foreign
	if len(shown) > 5 {
		shown = append(shown[:5:5], fmt.Sprintf("and %d more", len(foreign)-5))
	}
	return []string{fmt.Sprintf("%s: created after up, but holds what the node did not make (%s): not removed",
		e, strings.Join(shown, ", "))}
}

// clean removes, under dir, the empty directories, the symlinks into owned
// and what is named after one of the node's containers (all of it when ours:
// dir itself is named so); it collects everything else in foreign and reports
// whether dir is now empty.
func (n *Node) clean(dir, owned string, names map[string]bool, ours bool, foreign *[]string) bool {
	es, err := n.Host.ReadDir(dir)
	if err != nil {
		*foreign = append(*foreign, fmt.Sprintf("%s (%v)", dir, err))
		return false
	}
	empty := true
	for _, c := range es {
		p := path.Join(dir, c.Name)
		named := ours || names[p] || ownedName(c.Name, names)
		switch {
		case c.Link:
			t, err := n.Host.Readlink(p)
			if err == nil && !path.IsAbs(t) {
				t = path.Join(dir, t)
			}
			into := err == nil && owned != "" && (t == owned || strings.HasPrefix(t, strings.TrimSuffix(owned, "/")+"/"))
			if (named || into) && n.Host.Remove(p) == nil {
				continue
			}
			*foreign = append(*foreign, p)
			empty = false
		case c.Dir:
			if n.clean(p, owned, names, named, foreign) && n.Host.Remove(p) == nil {
				continue
			}
			empty = false
		default:
			if named && n.Host.Remove(p) == nil {
				continue
			}
			*foreign = append(*foreign, p)
			empty = false
		}
	}
	return empty
}
