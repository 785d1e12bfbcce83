package main

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// fakeHost is a small model of the machine: links, routes, iptables tables,
// nftables listings, sysctls, mounts and a file tree. Every command that
// changes something is appended to ops, in order.
type fakeHost struct {
	ops       []string
	installed map[string]bool
	sysctls   map[string]string
	mounts    []string
	busy      map[string]bool // umount without -l fails
	fs        map[string]fsNode
	links     map[string]string // link -> master ("" for none)
	routes    map[string]string // dst -> dev
	tables    map[string]*fakeTable
	nft       map[string]string // "family table" -> `nft -j list` output
	listRaw   map[string]string // "family table" -> `iptables -S` output to return instead
}

type fsNode struct {
	dir  bool
	link string
}

type fakeTable struct {
	chains  []string
	builtin map[string]bool
	rules   map[string][][]string
}

func newFakeHost() *fakeHost {
	h := &fakeHost{
		installed: map[string]bool{"iptables": true, "ip6tables": true, "nft": true},
		sysctls:   map[string]string{},
		busy:      map[string]bool{},
		fs:        map[string]fsNode{"/": {dir: true}},
		links:     map[string]string{"lo": "", "eth0": ""},
		routes:    map[string]string{"default": "eth0"},
		tables:    map[string]*fakeTable{},
		nft:       map[string]string{},
		listRaw:   map[string]string{},
	}
	for _, fam := range []string{"ip", "ip6"} {
		h.tables[fam+" filter"] = newTable("INPUT", "FORWARD", "OUTPUT")
		h.tables[fam+" nat"] = newTable("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING")
		h.tables[fam+" mangle"] = newTable("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING")
	}
	return h
}

func newTable(builtin ...string) *fakeTable {
	t := &fakeTable{builtin: map[string]bool{}, rules: map[string][][]string{}}
	for _, c := range builtin {
		t.chains = append(t.chains, c)
		t.builtin[c] = true
	}
	return t
}

func (h *fakeHost) op(format string, a ...any) { h.ops = append(h.ops, fmt.Sprintf(format, a...)) }

// mkdirAll and file make paths in the fake tree (as the node's processes or
// another tool would).
func (h *fakeHost) mkdirAll(p string) {
	for ; p != "/"; p = path.Dir(p) {
		h.fs[p] = fsNode{dir: true}
	}
}

func (h *fakeHost) file(p string) {
	h.mkdirAll(path.Dir(p))
	h.fs[p] = fsNode{}
}

func (h *fakeHost) symlink(p, target string) {
	h.mkdirAll(path.Dir(p))
	h.fs[p] = fsNode{link: target}
}

func (h *fakeHost) Has(name string) bool { return h.installed[name] }

func (h *fakeHost) ReadFile(p string) (string, error) {
	if p == "/proc/self/mountinfo" {
		var b strings.Builder
		for i, m := range h.mounts {
			fmt.Fprintf(&b, "%d 1 0:1 / %s rw - tmpfs tmpfs rw\n", 100+i, strings.ReplaceAll(m, " ", `\040`))
		}
		return b.String(), nil
	}
	if k, ok := strings.CutPrefix(p, "/proc/sys/"); ok {
		v, ok := h.sysctls[strings.ReplaceAll(k, "/", ".")]
		if !ok {
			return "", fmt.Errorf("open %s: no such file or directory", p)
		}
		return v + "\n", nil
	}
	return "", fmt.Errorf("open %s: no such file", p)
}

func (h *fakeHost) WriteFile(p, data string) error {
	k, ok := strings.CutPrefix(p, "/proc/sys/")
	if !ok {
		return fmt.Errorf("write %s: not a sysctl", p)
	}
	k = strings.ReplaceAll(k, "/", ".")
	h.op("sysctl %s=%s", k, strings.TrimSpace(data))
	h.sysctls[k] = strings.TrimSpace(data)
	return nil
}

func (h *fakeHost) Exists(p string) bool { _, ok := h.fs[p]; return ok }

func (h *fakeHost) ReadDir(p string) ([]DirEntry, error) {
	n, ok := h.fs[p]
	if !ok || !n.dir {
		return nil, fmt.Errorf("readdir %s: not a directory", p)
	}
	var out []DirEntry
	for q, c := range h.fs {
		if q != "/" && path.Dir(q) == p {
			out = append(out, DirEntry{Name: path.Base(q), Dir: c.dir, Link: c.link != ""})
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out, nil
}

func (h *fakeHost) Readlink(p string) (string, error) {
	n, ok := h.fs[p]
	if !ok || n.link == "" {
		return "", fmt.Errorf("readlink %s: not a link", p)
	}
	return n.link, nil
}

func (h *fakeHost) Remove(p string) error {
	n, ok := h.fs[p]
	if !ok {
		return fmt.Errorf("remove %s: no such file", p)
	}
	if n.dir {
		for q := range h.fs {
			if q != p && strings.HasPrefix(q, p+"/") {
				return fmt.Errorf("remove %s: directory not empty", p)
			}
		}
	}
	h.op("remove %s", p)
	delete(h.fs, p)
	return nil
}

func (h *fakeHost) Run(name string, args ...string) (string, error) {
	switch name {
	case "ip":
		return h.ip(args)
	case "iptables", "ip6tables":
		fam := "ip"
		if name == "ip6tables" {
			fam = "ip6"
		}
		return h.iptables(name, fam, args)
	case "nft":
		return h.nftCmd(args)
	case "umount":
		lazy := len(args) == 2 && args[0] == "-l"
		m := args[len(args)-1]
		if h.busy[m] && !lazy {
			return "", fmt.Errorf("umount %s: target is busy", m)
		}
		for i, x := range h.mounts {
			if x == m {
				h.mounts = append(h.mounts[:i], h.mounts[i+1:]...)
				h.op("umount %s", m)
				return "", nil
			}
		}
		return "", fmt.Errorf("umount %s: not mounted", m)
	}
	return "", fmt.Errorf("%s: not in the fake", name)
}

func (h *fakeHost) ip(a []string) (string, error) {
	s := strings.Join(a, " ")
	switch {
	case len(a) == 4 && a[0] == "link" && a[1] == "show" && a[2] == "dev":
		if _, ok := h.links[a[3]]; ok {
			return a[3] + ": <UP>\n", nil
		}
		return "", fmt.Errorf("ip %s: Device %q does not exist", s, a[3])
	case len(a) == 5 && a[0] == "link" && a[1] == "add" && a[3] == "type":
		h.op("ip link add %s", a[2])
		h.links[a[2]] = ""
		return "", nil
	case a[0] == "addr" || (a[0] == "link" && a[1] == "set"):
		return "", nil
	case len(a) == 5 && a[0] == "-o" && a[2] == "show" && a[3] == "master":
		var b strings.Builder
		i := 10
		for l, m := range h.links {
			if m == a[4] {
				fmt.Fprintf(&b, "%d: %s@if2: <BROADCAST> mtu 1500 master %s\n", i, l, m)
				i++
			}
		}
		return b.String(), nil
	case len(a) == 3 && a[0] == "link" && a[1] == "del":
		if _, ok := h.links[a[2]]; !ok {
			return "", fmt.Errorf("ip %s: Cannot find device", s)
		}
		h.op("ip link del %s", a[2])
		delete(h.links, a[2])
		for d, dev := range h.routes {
			if dev == a[2] {
				delete(h.routes, d)
			}
		}
		return "", nil
	case len(a) == 4 && a[0] == "route" && a[1] == "show" && a[2] == "exact":
		if dev, ok := h.routes[a[3]]; ok {
			return a[3] + " dev " + dev + " scope link \n", nil
		}
		return "", nil
	case len(a) == 5 && a[0] == "route" && a[1] == "replace":
		h.op("ip route replace %s dev %s", a[2], a[4])
		h.routes[a[2]] = a[4]
		return "", nil
	case len(a) == 5 && a[0] == "route" && a[1] == "del":
		if h.routes[a[2]] != a[4] {
			return "", fmt.Errorf("ip %s: No such process", s)
		}
		h.op("ip route del %s", a[2])
		delete(h.routes, a[2])
		return "", nil
	}
	return "", fmt.Errorf("ip %s: not in the fake", s)
}

func (h *fakeHost) table(fam, name string) *fakeTable {
	t, ok := h.tables[fam+" "+name]
	if !ok {
		t = newTable()
		h.tables[fam+" "+name] = t
	}
	return t
}

func (t *fakeTable) has(c string) bool {
	for _, x := range t.chains {
		if x == c {
			return true
		}
	}
	return false
}

func (t *fakeTable) find(chain string, rule []string) int {
	for i, r := range t.rules[chain] {
		if strings.Join(r, "\x00") == strings.Join(rule, "\x00") {
			return i
		}
	}
	return -1
}

// addChain and addRule are what kube-proxy (or another tool) does.
func (h *fakeHost) addChain(fam, table, chain string) {
	t := h.table(fam, table)
	if !t.has(chain) {
		t.chains = append(t.chains, chain)
	}
}

func (h *fakeHost) addRule(fam, table, chain string, rule ...string) {
	t := h.table(fam, table)
	t.rules[chain] = append(t.rules[chain], rule)
}

func (h *fakeHost) listing(fam, name string) string {
	if raw, ok := h.listRaw[fam+" "+name]; ok {
		return raw
	}
	t := h.table(fam, name)
	var b strings.Builder
	for _, c := range t.chains {
		if t.builtin[c] {
			fmt.Fprintf(&b, "-P %s ACCEPT\n", c)
		} else {
			fmt.Fprintf(&b, "-N %s\n", c)
		}
	}
	for _, c := range t.chains {
		for _, r := range t.rules[c] {
			q := make([]string, len(r))
			for i, a := range r {
				q[i] = quoteArg(a)
			}
			fmt.Fprintf(&b, "-A %s %s\n", c, strings.Join(q, " "))
		}
	}
	return b.String()
}

func (h *fakeHost) iptables(cmd, fam string, a []string) (string, error) {
	if len(a) < 3 || a[0] != "-t" {
		return "", fmt.Errorf("%s %v: not in the fake", cmd, a)
	}
	t := h.table(fam, a[1])
	verb := a[2]
	if verb == "-S" {
		return h.listing(fam, a[1]), nil
	}
	if len(a) < 4 {
		return "", fmt.Errorf("%s %v: not in the fake", cmd, a)
	}
	chain, rule := a[3], a[4:]
	if !t.has(chain) {
		return "", fmt.Errorf("%s: chain %s does not exist", cmd, chain)
	}
	switch verb {
	case "-C":
		if t.find(chain, rule) < 0 {
			return "", fmt.Errorf("%s: Bad rule (does a matching rule exist in that chain?)", cmd)
		}
		return "", nil
	case "-I":
		h.op("%s -t %s -I %s %s", cmd, a[1], chain, strings.Join(rule, " "))
		t.rules[chain] = append([][]string{rule}, t.rules[chain]...)
		return "", nil
	case "-D":
		i := t.find(chain, rule)
		if i < 0 {
			return "", fmt.Errorf("%s: Bad rule", cmd)
		}
		h.op("%s -t %s -D %s %s", cmd, a[1], chain, strings.Join(rule, " "))
		t.rules[chain] = append(t.rules[chain][:i:i], t.rules[chain][i+1:]...)
		return "", nil
	case "-F":
		h.op("%s -t %s -F %s", cmd, a[1], chain)
		delete(t.rules, chain)
		return "", nil
	case "-X":
		if t.builtin[chain] || len(t.rules[chain]) > 0 {
			return "", fmt.Errorf("%s: Directory not empty", cmd)
		}
		for _, c := range t.chains {
			for _, r := range t.rules[c] {
				if jumpTarget(r) == chain {
					return "", fmt.Errorf("%s: Too many links", cmd)
				}
			}
		}
		h.op("%s -t %s -X %s", cmd, a[1], chain)
		for i, c := range t.chains {
			if c == chain {
				t.chains = append(t.chains[:i:i], t.chains[i+1:]...)
				break
			}
		}
		return "", nil
	}
	return "", fmt.Errorf("%s %v: not in the fake", cmd, a)
}

func (h *fakeHost) nftCmd(a []string) (string, error) {
	s := strings.Join(a, " ")
	switch {
	case len(a) == 4 && a[0] == "list" && a[1] == "table":
		if _, ok := h.nft[a[2]+" "+a[3]]; ok {
			return "table " + a[2] + " " + a[3] + " {}\n", nil
		}
		return "", fmt.Errorf("nft %s: Error: No such file or directory", s)
	case len(a) == 5 && a[0] == "-j" && a[1] == "list" && a[2] == "table":
		if out, ok := h.nft[a[3]+" "+a[4]]; ok {
			return out, nil
		}
		return "", fmt.Errorf("nft %s: Error: No such file or directory; did you mean table 'filter' in family ip?", s)
	case len(a) == 4 && a[0] == "delete" && a[1] == "table":
		if _, ok := h.nft[a[2]+" "+a[3]]; !ok {
			return "", fmt.Errorf("nft %s: Error: No such file or directory", s)
		}
		h.op("nft delete table %s %s", a[2], a[3])
		delete(h.nft, a[2]+" "+a[3])
		return "", nil
	}
	return "", fmt.Errorf("nft %s: not in the fake", s)
}
