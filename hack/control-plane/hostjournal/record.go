package main

import (
	"crypto/sha256"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Node is the journal and the host it describes.
type Node struct {
	J    *Journal
	Host Host
	// Log receives what a record or an undo wants the user to know.
	Log func(format string, args ...any)
}

func (n *Node) logf(format string, args ...any) {
	if n.Log != nil {
		n.Log(format, args...)
	}
}

// Dirs journals each path that does not exist yet: the node's processes may
// create it, and undo then removes what they left there. Symlinks in it that
// point under owned (the plane's state directory) are the node's too, as are
// the files at the paths in made, and every mount that appears under it
// (journaled after it: unmounted first).
func (n *Node) Dirs(owned string, made []string, paths ...string) error {
	for _, p := range paths {
		e := Entry{Kind: KindDir, Path: path.Clean(p), Owned: owned}
		for _, m := range made {
			if strings.HasPrefix(path.Clean(m), e.Path+"/") {
				e.Made = append(e.Made, path.Clean(m))
			}
		}
		if n.J.Has(e) || n.Host.Exists(p) {
			continue
		}
		if _, err := n.J.Record(e); err != nil {
			return err
		}
		if err := n.Mounts(p); err != nil {
			return err
		}
	}
	return nil
}

// Mounts journals, for each path, the mount points already at or under it.
func (n *Node) Mounts(paths ...string) error {
	for _, p := range paths {
		p = path.Clean(p)
		e := Entry{Kind: KindMounts, Path: p}
		if n.J.Has(e) {
			continue
		}
		all, err := n.mountPoints()
		if err != nil {
			return err
		}
		e.Existing = under(all, p)
		if _, err := n.J.Record(e); err != nil {
			return err
		}
	}
	return nil
}

// Cgroups journals the cgroups named prefix* that exist under root.
func (n *Node) Cgroups(root, prefix string) error {
	e := Entry{Kind: KindCgroups, Path: path.Clean(root), Prefix: prefix}
	if n.J.Has(e) {
		return nil
	}
	e.Existing = n.findCgroups(e.Path, prefix)
	_, err := n.J.Record(e)
	return err
}

// NftTables journals each "family/table" that does not exist yet. Journal
// these before anything lists iptables: iptables-nft creates a table when
// first asked about it.
func (n *Node) NftTables(specs ...string) error {
	if !n.Host.Has("nft") {
		n.logf("nft is not installed: tables iptables-nft creates are not journaled")
		return nil
	}
	for _, s := range specs {
		family, table, ok := strings.Cut(s, "/")
		if !ok {
			return fmt.Errorf("nft table %q: want family/table", s)
		}
		e := Entry{Kind: KindNftTable, Family: family, Table: table}
		if n.J.Has(e) {
			continue
		}
		if _, err := n.Host.Run("nft", "list", "table", family, table); err == nil {
			continue
		}
		if _, err := n.J.Record(e); err != nil {
			return err
		}
	}
	return nil
}

// Chains journals the chains of each table, for each address family whose
// iptables is installed: chains named prefix* that appear later are the
// node's. A table whose listing cannot be read is not journaled, and so is
// never touched by undo.
func (n *Node) Chains(prefix string, tables ...string) error {
	for _, family := range []string{"ip", "ip6"} {
		cmd := iptablesCmd(family)
		if !n.Host.Has(cmd) {
			continue
		}
		for _, t := range tables {
			e := Entry{Kind: KindChains, Family: family, Table: t, Prefix: prefix}
			if n.J.Has(e) {
				continue
			}
			out, err := n.Host.Run(cmd, "-t", t, "-S")
			if err != nil {
				n.logf("%s table %s not journaled (its chains will not be removed): %v", family, t, err)
				continue
			}
			l, err := parseListing(out)
			if err != nil {
				n.logf("%s table %s not journaled (its chains will not be removed): %v", family, t, err)
				continue
			}
			e.Existing = l.Chains
			for _, c := range l.User {
				if strings.HasPrefix(c, prefix) {
					n.logf("%s table %s has chain %s before up (another kube-proxy?): it is never removed", family, t, c)
				}
			}
			if _, err := n.J.Record(e); err != nil {
				return err
			}
		}
	}
	return nil
}

func sysctlPath(key string) string {
	return "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
}

func (n *Node) readSysctl(key string) (string, error) {
	v, err := n.Host.ReadFile(sysctlPath(key))
	return strings.Join(strings.Fields(v), " "), err
}

// Sysctl sets key to value, journaling its value before. A key the kernel
// does not have is skipped.
func (n *Node) Sysctl(key, value string) error {
	before, err := n.readSysctl(key)
	if err != nil {
		n.logf("sysctl %s: %v (skipped)", key, err)
		return nil
	}
	if _, err := n.J.Record(Entry{Kind: KindSysctl, Key: key, Before: before, Set: value}); err != nil {
		return err
	}
	if before == value {
		return nil
	}
	return n.Host.WriteFile(sysctlPath(key), value+"\n")
}

func (n *Node) linkExists(name string) bool {
	_, err := n.Host.Run("ip", "link", "show", "dev", name)
	return err == nil
}

// Bridge creates the bridge name (unless this journal already made it) and
// gives it addr, up. A bridge of that name that this journal did not make is
// someone else's: an error.
func (n *Node) Bridge(name, addr string) error {
	e := Entry{Kind: KindBridge, Name: name, Addr: addr}
	if !n.J.Has(e) {
		if n.linkExists(name) {
			return fmt.Errorf("bridge %s exists and is not this plane's (another node plane? set KURA_NODE_BRIDGE)", name)
		}
		if _, err := n.J.Record(e); err != nil {
			return err
		}
	}
	if !n.linkExists(name) {
		if _, err := n.Host.Run("ip", "link", "add", name, "type", "bridge"); err != nil {
			return err
		}
	}
	if _, err := n.Host.Run("ip", "addr", "replace", addr, "dev", name); err != nil {
		return err
	}
	_, err := n.Host.Run("ip", "link", "set", name, "up")
	return err
}

// Route routes dst to dev. A route to dst that this journal did not add is
// someone else's: an error.
func (n *Node) Route(dst, dev string) error {
	e := Entry{Kind: KindRoute, Dst: dst, Dev: dev}
	if !n.J.Has(e) {
		out, err := n.Host.Run("ip", "route", "show", "exact", dst)
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "" {
			return fmt.Errorf("%s is already routed here (%s)", dst, strings.TrimSpace(out))
		}
		if _, err := n.J.Record(e); err != nil {
			return err
		}
	}
	_, err := n.Host.Run("ip", "route", "replace", dst, "dev", dev)
	return err
}

// Rule inserts an iptables rule at the top of chain. The same rule already
// there and not journaled is someone else's: left as it is, and not journaled.
func (n *Node) Rule(family, table, chain string, rule []string) error {
	e := Entry{Kind: KindRule, Family: family, Table: table, Chain: chain, Rule: rule}
	cmd := iptablesCmd(family)
	check := append([]string{"-t", table, "-C", chain}, rule...)
	_, err := n.Host.Run(cmd, check...)
	present := err == nil
	if n.J.Has(e) && present {
		return nil
	}
	if present {
		n.logf("%s is there already and not this plane's: left as it is", e)
		return nil
	}
	if _, err := n.J.Record(e); err != nil {
		return err
	}
	_, err = n.Host.Run(cmd, append([]string{"-t", table, "-I", chain}, rule...)...)
	return err
}

// Containers journals the ids of the node's containers and pod sandboxes
// (containerd at address, namespace k8s.io).
func (n *Node) Containers(address string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	sort.Strings(ids)
	_, err := n.J.Record(Entry{Kind: KindContainers, Path: address, Existing: ids})
	return err
}

// ownedNames are the file names that are the node's wherever they are in a
// journaled directory: its containers' ids, and the names of their shims'
// sockets (containerd's shim.SocketAddress: the sha256 of the containerd
// address, the namespace and the id, under /run/containerd/s).
func (n *Node) ownedNames() map[string]bool {
	names := map[string]bool{}
	for _, e := range n.J.Entries {
		if e.Kind != KindContainers {
			continue
		}
		for _, id := range e.Existing {
			names[id] = true
			names[fmt.Sprintf("%x", sha256.Sum256([]byte(path.Join(e.Path, "k8s.io", id))))] = true
		}
	}
	return names
}

// ownedName: a name that is, or contains, one of the node's ids (the CNI cache
// names its results NETWORK-ID-IFNAME).
func ownedName(name string, names map[string]bool) bool {
	if names[name] {
		return true
	}
	for id := range names {
		if len(id) >= 32 && strings.Contains(name, id) {
			return true
		}
	}
	return false
}

// mountPoints reads /proc/self/mountinfo.
func (n *Node) mountPoints() ([]string, error) {
	info, err := n.Host.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(info, "\n") {
		f := strings.Fields(line)
		if len(f) > 4 {
			out = append(out, unescapeMount(f[4]))
		}
	}
	return out, nil
}

// unescapeMount decodes the octal escapes of mountinfo (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// under keeps the paths at or under dir, deepest first.
func under(paths []string, dir string) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range paths {
		if (p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")) && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, k int) bool {
		if len(out[i]) != len(out[k]) {
			return len(out[i]) > len(out[k])
		}
		return out[i] < out[k]
	})
	return out
}

// findCgroups lists directories named prefix* within three levels of root
// (not looking inside a match).
func (n *Node) findCgroups(root, prefix string) []string {
	var out []string
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if depth > 3 {
			return
		}
		es, err := n.Host.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range es {
			if !e.Dir || e.Link {
				continue
			}
			p := path.Join(dir, e.Name)
			if strings.HasPrefix(e.Name, prefix) {
				out = append(out, p)
				continue
			}
			walk(p, depth+1)
		}
	}
	walk(root, 1)
	sort.Strings(out)
	return out
}
