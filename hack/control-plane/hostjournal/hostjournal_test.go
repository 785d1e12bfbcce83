package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const state = "/tmp/plane/node"

// emptyNft is the listing of a table iptables-nft made and nobody filled.
const emptyNft = `{"nftables": [{"metainfo": {"version": "1.1.3", "json_schema_version": 1}},
 {"table": {"family": "ip", "name": "filter", "handle": 4}},
 {"chain": {"family": "ip", "table": "filter", "name": "INPUT", "handle": 1, "type": "filter", "hook": "input", "prio": 0, "policy": "accept"}},
 {"chain": {"family": "ip", "table": "filter", "name": "FORWARD", "handle": 2, "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}}]}`

func newNode(t *testing.T, h *fakeHost) *Node {
	t.Helper()
	j, err := Load(filepath.Join(t.TempDir(), "journal"))
	if err != nil {
		t.Fatal(err)
	}
	return &Node{J: j, Host: h, Log: func(f string, a ...any) { t.Logf(f, a...) }}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// up journals and makes the node's changes in the order
// scripts/control-plane-node.sh does.
func up(t *testing.T, n *Node) {
	t.Helper()
	must(t, n.Dirs(state, []string{"/var/lib/kubelet/device-plugins/kubelet.sock"}, "/var/lib/kubelet", "/var/log/containers", "/opt/cni"))
	must(t, n.Mounts(state))
	must(t, n.Cgroups("/sys/fs/cgroup", "kubepods"))
	must(t, n.NftTables("ip/filter", "ip/nat", "ip/mangle"))
	must(t, n.Chains("KUBE-", "filter", "nat", "mangle"))
	must(t, n.Sysctl("net.ipv4.ip_forward", "1"))
	must(t, n.Sysctl("kernel.panic", "10"))
	must(t, n.Bridge("kura0", "10.217.0.1/24"))
	must(t, n.Route("10.218.0.0/16", "kura0"))
	must(t, n.Rule("ip", "mangle", "FORWARD", strings.Fields("-i kura0 ! -o kura0 -j DROP")))
}

// node plays the processes `up` started: kube-proxy's chains, a pod's veth,
// mounts, cgroups, the kubelet's log links.
func node(h *fakeHost) {
	h.addChain("ip", "nat", "KUBE-SERVICES")
	h.addChain("ip", "nat", "KUBE-SVC-ABC")
	h.addChain("ip", "nat", "KUBE-SEP-DEF")
	h.addRule("ip", "nat", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES")
	h.addRule("ip", "nat", "OUTPUT", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES")
	h.addRule("ip", "nat", "KUBE-SERVICES", "-d", "10.218.0.1/32", "-p", "tcp", "-m", "comment", "--comment", `default/kubernetes:https "cluster IP"`, "-j", "KUBE-SVC-ABC")
	h.addRule("ip", "nat", "KUBE-SVC-ABC", "-j", "KUBE-SEP-DEF")
	h.addRule("ip", "nat", "KUBE-SEP-DEF", "-p", "tcp", "-j", "DNAT", "--to-destination", "10.217.0.1:16443")
	h.addChain("ip", "mangle", "KUBE-KUBELET-CANARY")
	h.links["veth1"] = "kura0"
	h.mounts = append(h.mounts, state+"/containerd/state/netns/cni-1", state+"/kubelet", state+"/kubelet/pods/x/volumes/tok")
	h.mkdirAll("/sys/fs/cgroup/memory/kubepods/burstable/pod1")
	h.mkdirAll("/sys/fs/cgroup/cpu/kubepods/besteffort")
	h.symlink("/var/log/containers/standin_ns_standin-1.log", state+"/pod-logs/ns_standin_1/standin/0.log")
	h.mkdirAll("/var/lib/kubelet/plugins_registry")
	h.file("/var/lib/kubelet/device-plugins/kubelet.sock")
	h.mkdirAll("/opt/cni/net.d")
	h.nft["ip filter"] = emptyNft
	h.nft["ip mangle"] = strings.ReplaceAll(emptyNft, `"filter"`, `"mangle"`)
}

// before is a host with something of everyone else's on it.
func before() *fakeHost {
	h := newFakeHost()
	h.sysctls["net.ipv4.ip_forward"] = "0"
	h.sysctls["kernel.panic"] = "1"
	h.mounts = []string{"/", "/proc", "/sys/fs/cgroup/memory"}
	h.mkdirAll("/sys/fs/cgroup/memory/system.slice")
	h.mkdirAll("/sys/fs/cgroup/cpu")
	h.mkdirAll("/tmp/plane/node")
	h.mkdirAll("/var/lib")
	h.mkdirAll("/var/log")
	h.mkdirAll("/opt")
	h.nft["ip nat"] = `{"nftables": [{"table": {"family": "ip", "name": "nat"}}]}`
	h.addChain("ip", "filter", "DOCKER-USER")
	h.addRule("ip", "filter", "FORWARD", "-j", "DOCKER-USER")
	return h
}

func snapshot(h *fakeHost) string {
	var b strings.Builder
	fmt.Fprintln(&b, h.sysctls, h.mounts, h.links, h.routes)
	for _, k := range []string{"ip filter", "ip nat", "ip mangle", "ip6 filter"} {
		fmt.Fprintln(&b, k, h.listing(strings.Fields(k)[0], strings.Fields(k)[1]))
	}
	var nft []string
	for k := range h.nft {
		nft = append(nft, k)
	}
	var files []string
	for p, n := range h.fs {
		files = append(files, fmt.Sprintf("%s %v", p, n))
	}
	fmt.Fprintln(&b, sorted(nft), sorted(files))
	return b.String()
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	for i := range s {
		for k := i + 1; k < len(s); k++ {
			if s[k] < s[i] {
				s[i], s[k] = s[k], s[i]
			}
		}
	}
	return s
}

func TestUndoLeavesTheHostAsItWas(t *testing.T) {
	h := before()
	want := snapshot(h)
	n := newNode(t, h)
	up(t, n)
	node(h)
	if left := n.Undo(); len(left) > 0 {
		t.Fatalf("left: %v", left)
	}
	if got := snapshot(h); got != want {
		t.Errorf("host after undo:\n%s\nbefore up:\n%s", got, want)
	}
}

// The undo of each change comes in the reverse order of the changes: the guard
// rule, the route, the bridge, the sysctls, kube-proxy's chains, the nftables
// tables, the cgroups, the mounts, the directories.
func TestUndoIsInReverseOrder(t *testing.T) {
	h := before()
	n := newNode(t, h)
	up(t, n)
	node(h)
	h.ops = nil
	n.Undo()
	first := func(prefix string) int {
		for i, op := range h.ops {
			if strings.HasPrefix(op, prefix) {
				return i
			}
		}
		t.Fatalf("no %q in %q", prefix, h.ops)
		return -1
	}
	order := []string{
		"iptables -t mangle -D FORWARD -i kura0",
		"ip link del veth1",
		"ip link del kura0",
		"sysctl kernel.panic=1",
		"sysctl net.ipv4.ip_forward=0",
		"iptables -t mangle -X KUBE-KUBELET-CANARY",
		"iptables -t nat -D PREROUTING",
		"iptables -t nat -X KUBE-SEP-DEF",
		"iptables -t filter", // nothing of the node's there: must not appear
	}
	last := -1
	for _, p := range order[:len(order)-1] {
		i := first(p)
		if i < last {
			t.Errorf("%q came before the step before it: %q", p, h.ops)
		}
		last = i
	}
	for _, op := range h.ops {
		if strings.HasPrefix(op, order[len(order)-1]) {
			t.Errorf("touched the filter table, which holds nothing of the node's: %q", op)
		}
	}
	later := []string{"nft delete table ip mangle", "nft delete table ip filter",
		"remove /sys/fs/cgroup/memory/kubepods/burstable/pod1", "remove /sys/fs/cgroup/memory/kubepods",
		"umount " + state + "/kubelet/pods/x/volumes/tok", "umount " + state + "/kubelet",
		"remove /opt/cni/net.d", "remove /opt/cni", "remove /var/log/containers/standin", "remove /var/lib/kubelet/plugins_registry"}
	for _, p := range later {
		i := first(p)
		if i < last {
			t.Errorf("%q came before the step before it: %q", p, h.ops)
		}
		last = i
	}
	// The route went with the bridge; the explicit delete found it gone.
	if _, ok := h.routes["10.218.0.0/16"]; ok {
		t.Errorf("route left")
	}
}

func TestSysctlChangedBySomeoneElseSinceUpIsLeftAlone(t *testing.T) {
	h := before()
	n := newNode(t, h)
	up(t, n)
	h.sysctls["kernel.panic"] = "30" // an administrator, after up
	h.ops = nil
	left := n.Undo()
	if h.sysctls["kernel.panic"] != "30" {
		t.Errorf("kernel.panic = %s, want 30 (someone else's value)", h.sysctls["kernel.panic"])
	}
	if h.sysctls["net.ipv4.ip_forward"] != "0" {
		t.Errorf("ip_forward = %s, want 0 (up set it, nobody changed it since)", h.sysctls["net.ipv4.ip_forward"])
	}
	if len(left) != 1 || !strings.Contains(left[0], "kernel.panic") || !strings.Contains(left[0], "someone else") {
		t.Errorf("report: %q", left)
	}
}

func TestSysctlUpDidNotChangeIsNotWritten(t *testing.T) {
	h := before()
	h.sysctls["net.ipv4.ip_forward"] = "1"
	n := newNode(t, h)
	must(t, n.Sysctl("net.ipv4.ip_forward", "1"))
	must(t, n.Sysctl("no.such.key", "1"))
	if len(h.ops) != 0 {
		t.Errorf("wrote %q", h.ops)
	}
	if left := n.Undo(); len(left) != 0 || len(h.ops) != 0 {
		t.Errorf("undo wrote %q, left %q", h.ops, left)
	}
}

func TestSysctlSetTwiceUnwindsToTheFirstBefore(t *testing.T) {
	h := before()
	n := newNode(t, h)
	must(t, n.Sysctl("kernel.panic", "10"))
	must(t, n.Sysctl("kernel.panic", "10")) // a second up: not journaled again
	must(t, n.Sysctl("kernel.panic", "20"))
	if len(n.J.Entries) != 2 {
		t.Fatalf("entries: %v", n.J.Entries)
	}
	if left := n.Undo(); len(left) != 0 || h.sysctls["kernel.panic"] != "1" {
		t.Errorf("kernel.panic = %s, left %q", h.sysctls["kernel.panic"], left)
	}
}

// A directory the node's processes created, which another tool then filled,
// keeps that tool's files (and the directories holding them); the empty
// directories and the symlinks into the plane's state go.
func TestDirectoryAnotherToolFilledIsNotRemovedWholesale(t *testing.T) {
	h := before()
	n := newNode(t, h)
	up(t, n)
	node(h)
	h.file("/opt/cni/bin/bridge") // a CNI installer, after up
	h.mkdirAll("/opt/cni/cache/empty")
	h.symlink("/var/log/containers/other.log", "/var/log/pods/other/0.log") // another kubelet's
	left := n.Undo()
	for _, p := range []string{"/opt/cni/bin/bridge", "/var/log/containers/other.log"} {
		if !h.Exists(p) {
			t.Errorf("%s removed", p)
		}
	}
	for _, p := range []string{"/opt/cni/cache", "/var/log/containers/standin_ns_standin-1.log", "/var/lib/kubelet"} {
		if h.Exists(p) {
			t.Errorf("%s left", p)
		}
	}
	got := strings.Join(left, "\n")
	if len(left) != 2 || !strings.Contains(got, "/opt/cni/bin/bridge") || !strings.Contains(got, "/var/log/containers/other.log") {
		t.Errorf("report: %q", left)
	}
}

// A directory there before up is never journaled, so never touched.
func TestDirectoryThereBeforeUpIsNotJournaled(t *testing.T) {
	h := before()
	h.file("/opt/cni/bin/loopback")
	n := newNode(t, h)
	must(t, n.Dirs(state, nil, "/opt/cni"))
	node(h)
	if len(n.J.Entries) != 0 {
		t.Fatalf("journaled %v", n.J.Entries)
	}
	n.Undo()
	if !h.Exists("/opt/cni/bin/loopback") {
		t.Errorf("removed")
	}
}

// Only chains named KUBE-* that were not there before up are removed (with the
// rules that jump to them); a KUBE-* chain there before, its rules, and chains
// of other names made after up all stay.
func TestOnlyKubeChainsMadeAfterUpAreRemoved(t *testing.T) {
	h := before()
	h.addChain("ip", "nat", "KUBE-OTHER") // another kube-proxy's, before up
	h.addRule("ip", "nat", "PREROUTING", "-j", "KUBE-OTHER")
	h.addRule("ip", "nat", "KUBE-OTHER", "-j", "RETURN")
	n := newNode(t, h)
	up(t, n)
	node(h)
	h.addChain("ip", "nat", "DOCKER") // another tool, after up
	h.addRule("ip", "nat", "PREROUTING", "-j", "DOCKER")
	h.addRule("ip", "nat", "KUBE-OTHER", "-j", "KUBE-SERVICES") // someone's rule to the node's chain
	if left := n.Undo(); len(left) > 0 {
		t.Fatalf("left: %v", left)
	}
	got := h.listing("ip", "nat")
	want := "-P PREROUTING ACCEPT\n-P INPUT ACCEPT\n-P OUTPUT ACCEPT\n-P POSTROUTING ACCEPT\n" +
		"-N KUBE-OTHER\n-N DOCKER\n-A PREROUTING -j KUBE-OTHER\n-A PREROUTING -j DOCKER\n-A KUBE-OTHER -j RETURN\n"
	if got != want {
		t.Errorf("nat after undo:\n%s\nwant:\n%s", got, want)
	}
}

// A table whose listing cannot be read is left alone, and said so.
func TestChainsOfATableWhoseListingDoesNotParseAreLeftAlone(t *testing.T) {
	h := before()
	n := newNode(t, h)
	up(t, n)
	node(h)
	h.listRaw["ip nat"] = "-P PREROUTING ACCEPT\n-N KUBE-SERVICES\n-A PREROUTING -m comment --comment \"unterminated -j KUBE-SERVICES\n"
	h.ops = nil
	left := n.Undo()
	for _, op := range h.ops {
		if strings.Contains(op, "-t nat") {
			t.Errorf("acted on nat: %q", op)
		}
	}
	if len(left) != 1 || !strings.Contains(left[0], "ip nat") || !strings.Contains(left[0], "not understood") {
		t.Errorf("report: %q", left)
	}
}

func TestNftTables(t *testing.T) {
	for _, c := range []struct {
		name, listing string
		deleted       bool
		report        string
	}{
		{"empty built-in chains", emptyNft, true, ""},
		{"a rule of someone else's", strings.Replace(emptyNft, `]}`, `, {"rule": {"family": "ip", "table": "filter", "chain": "INPUT", "expr": []}}]}`, 1), false, "holds a rule"},
		{"a chain of someone else's", strings.Replace(emptyNft, `"name": "FORWARD"`, `"name": "MINE"`, 1), false, "holds chain MINE"},
		{"a listing that does not parse", `{"nftables": [{"table": `, false, "did not parse"},
		{"gone already", "", false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := before()
			n := newNode(t, h)
			must(t, n.NftTables("ip/filter"))
			if c.listing != "" {
				h.nft["ip filter"] = c.listing
			}
			left := n.Undo()
			_, there := h.nft["ip filter"]
			if there == c.deleted && c.listing != "" {
				t.Errorf("deleted: %v, want %v", !there, c.deleted)
			}
			if c.report == "" && len(left) > 0 || c.report != "" && (len(left) != 1 || !strings.Contains(left[0], c.report)) {
				t.Errorf("report %q, want %q", left, c.report)
			}
		})
	}
	// A table there before up is not journaled.
	h := before()
	n := newNode(t, h)
	must(t, n.NftTables("ip/nat"))
	if len(n.J.Entries) != 0 {
		t.Errorf("journaled %v", n.J.Entries)
	}
}

func TestBridgeOrRouteOfSomeoneElseIsRefused(t *testing.T) {
	h := before()
	h.links["kura0"] = ""
	n := newNode(t, h)
	if err := n.Bridge("kura0", "10.217.0.1/24"); err == nil || !strings.Contains(err.Error(), "not this plane's") {
		t.Errorf("err: %v", err)
	}
	h.routes["10.218.0.0/16"] = "eth0"
	if err := n.Route("10.218.0.0/16", "kura1"); err == nil || !strings.Contains(err.Error(), "already routed") {
		t.Errorf("err: %v", err)
	}
	if len(n.J.Entries) != 0 || len(h.ops) != 0 {
		t.Errorf("journaled %v, did %q", n.J.Entries, h.ops)
	}
	n.Undo()
	if _, ok := h.links["kura0"]; !ok || h.routes["10.218.0.0/16"] != "eth0" {
		t.Errorf("removed someone else's bridge or route")
	}
}

// The same guard rule there already is someone else's: not journaled, not removed.
func TestRuleThereBeforeUpIsNotRemoved(t *testing.T) {
	h := before()
	rule := strings.Fields("-i kura0 ! -o kura0 -j DROP")
	h.addRule("ip", "mangle", "FORWARD", rule...)
	n := newNode(t, h)
	must(t, n.Rule("ip", "mangle", "FORWARD", rule))
	n.Undo()
	if h.table("ip", "mangle").find("FORWARD", rule) < 0 {
		t.Errorf("removed")
	}
}

// An up interrupted after journaling a change and before making it: undo
// finds nothing to do and reports nothing.
func TestInterruptedUpIsUndone(t *testing.T) {
	h := before()
	n := newNode(t, h)
	for _, e := range []Entry{
		{Kind: KindBridge, Name: "kura0", Addr: "10.217.0.1/24"},
		{Kind: KindRoute, Dst: "10.218.0.0/16", Dev: "kura0"},
		{Kind: KindRule, Family: "ip", Table: "mangle", Chain: "FORWARD", Rule: []string{"-j", "DROP"}},
		{Kind: KindSysctl, Key: "net.ipv4.ip_forward", Before: "0", Set: "1"},
		{Kind: KindDir, Path: "/var/lib/kubelet", Owned: state},
	} {
		if _, err := n.J.Record(e); err != nil {
			t.Fatal(err)
		}
	}
	if left := n.Undo(); len(left) != 0 || len(h.ops) != 0 {
		t.Errorf("left %q, did %q", left, h.ops)
	}
}

// A second up keeps the first one's record of what was there: chains the node
// made in between are still the node's.
func TestSecondUpKeepsTheFirstBaseline(t *testing.T) {
	h := before()
	n := newNode(t, h)
	up(t, n)
	node(h)
	count := len(n.J.Entries)
	up(t, n)
	if len(n.J.Entries) != count {
		t.Errorf("second up journaled again: %v", n.J.Entries[count:])
	}
	if left := n.Undo(); len(left) > 0 {
		t.Fatalf("left: %v", left)
	}
	if strings.Contains(h.listing("ip", "nat"), "KUBE-") {
		t.Errorf("KUBE chains left")
	}
}

func TestBusyMountIsDetached(t *testing.T) {
	h := before()
	n := newNode(t, h)
	must(t, n.Mounts(state))
	h.mounts = append(h.mounts, state+"/a", state+"/a b/c")
	h.busy[state+"/a"] = true
	if left := n.Undo(); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
	want := []string{"umount " + state + "/a b/c", "umount " + state + "/a"}
	if !reflect.DeepEqual(h.ops, want) {
		t.Errorf("ops %q, want %q", h.ops, want)
	}
}

func TestCgroupWithProcessesIsReported(t *testing.T) {
	h := before()
	n := newNode(t, h)
	must(t, n.Cgroups("/sys/fs/cgroup", "kubepods"))
	h.mkdirAll("/sys/fs/cgroup/memory/kubepods/pod1")
	h.file("/sys/fs/cgroup/memory/kubepods/pod1/cgroup.procs.busy")
	left := n.Undo()
	if len(left) != 1 || !strings.Contains(left[0], "cgroup /sys/fs/cgroup/memory/kubepods") {
		t.Errorf("left: %q", left)
	}
}

func TestJournalFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "journal")
	j, err := Load(p)
	must(t, err)
	e := Entry{Kind: KindRule, Family: "ip", Table: "mangle", Chain: "FORWARD", Rule: []string{"-m", "comment", "--comment", `a "b" c`}}
	if ok, err := j.Record(e); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, _ := j.Record(e); ok {
		t.Errorf("recorded twice")
	}
	j2, err := Load(p)
	must(t, err)
	if !reflect.DeepEqual(j2.Entries, []Entry{e}) {
		t.Errorf("read back %v", j2.Entries)
	}
	must(t, os.WriteFile(p, []byte("{\"kind\":\"dir\"}\nlink kura0\n"), 0o600))
	if _, err := Load(p); err == nil {
		t.Errorf("a damaged journal loaded")
	}
}

func TestSplitArgs(t *testing.T) {
	for line, want := range map[string][]string{
		`-A KUBE-SERVICES -m comment --comment "default/kubernetes:https cluster IP" -j KUBE-SVC-NPX`: {"-A", "KUBE-SERVICES", "-m", "comment", "--comment", "default/kubernetes:https cluster IP", "-j", "KUBE-SVC-NPX"},
		`-A X -m comment --comment "a \"q\" \\ b"`:                                                    {"-A", "X", "-m", "comment", "--comment", `a "q" \ b`},
		`-A X -m comment --comment ""`:                                                                {"-A", "X", "-m", "comment", "--comment", ""},
	} {
		got, err := splitArgs(line)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %q %v", line, got, err)
		}
		var q []string
		for _, a := range got {
			q = append(q, quoteArg(a))
		}
		if again, _ := splitArgs(strings.Join(q, " ")); !reflect.DeepEqual(again, want) {
			t.Errorf("round trip of %s: %q", line, again)
		}
	}
	if _, err := parseListing("-A X \"open\n"); err == nil {
		t.Errorf("unterminated quote parsed")
	}
	if _, err := parseListing("-Z X\n"); err == nil {
		t.Errorf("unknown line parsed")
	}
}

func TestCommandLine(t *testing.T) {
	h := before()
	p := filepath.Join(t.TempDir(), "journal")
	for _, args := range [][]string{
		{"-journal", p, "sysctl", "kernel.panic=10"},
		{"-journal", p, "bridge", "kura0", "10.217.0.1/24"},
		{"-journal", p, "iptables-rule", "ip", "mangle", "FORWARD", "-i", "kura0", "!", "-o", "kura0", "-j", "DROP"},
	} {
		if rc := run(args, h); rc != 0 {
			t.Fatalf("%v: exit %d", args, rc)
		}
	}
	if rc := run([]string{"-journal", p, "has", "bridge", "kura0"}, h); rc != 0 {
		t.Errorf("has bridge kura0: exit %d", rc)
	}
	if rc := run([]string{"-journal", p, "has", "bridge", "kura1"}, h); rc != 1 {
		t.Errorf("has bridge kura1: exit %d", rc)
	}
	h.sysctls["kernel.panic"] = "5"
	if rc := run([]string{"-journal", p, "undo"}, h); rc != 3 {
		t.Errorf("undo with a sysctl left: exit %d", rc)
	}
	if _, ok := h.links["kura0"]; ok || h.table("ip", "mangle").find("FORWARD", strings.Fields("-i kura0 ! -o kura0 -j DROP")) >= 0 {
		t.Errorf("bridge or rule left")
	}
	if rc := run([]string{"-journal", p, "dirs", "-owned", state, "-made", "/var/lib/kubelet/a.sock", "-made", "/x/b", "/var/lib/kubelet", "/etc/cni"}, h); rc != 0 {
		t.Errorf("dirs: exit %d", rc)
	}
	j, err := Load(p)
	must(t, err)
	var dirs []Entry
	for _, e := range j.Entries {
		if e.Kind == KindDir {
			dirs = append(dirs, e)
		}
	}
	want := []Entry{{Kind: KindDir, Path: "/var/lib/kubelet", Owned: state, Made: []string{"/var/lib/kubelet/a.sock"}},
		{Kind: KindDir, Path: "/etc/cni", Owned: state}}
	if !reflect.DeepEqual(dirs, want) {
		t.Errorf("dirs journaled %+v, want %+v", dirs, want)
	}
	if rc := run([]string{"-journal", p, "frobnicate"}, h); rc != 2 {
		t.Errorf("unknown verb: exit %d", rc)
	}
}

// What is named after the node's containers (journaled by `down` while its
// containerd runs) is the node's: CNI result caches, runc state, shim sockets.
func TestFilesNamedAfterTheNodesContainersAreRemoved(t *testing.T) {
	h := before()
	h.mkdirAll("/run")
	n := newNode(t, h)
	must(t, n.Dirs(state, nil, "/var/lib/cni", "/run/containerd"))
	sandbox := strings.Repeat("ab", 32)
	other := strings.Repeat("cd", 32)
	sock := state + "/containerd/containerd.sock"
	h.file("/var/lib/cni/results/kura-" + sandbox + "-eth0")
	h.file("/var/lib/cni/results/other-" + other + "-eth0") // another runtime's pod
	h.file("/run/containerd/runc/k8s.io/" + sandbox + "/state.json")
	h.file(fmt.Sprintf("/run/containerd/s/%x", sha256.Sum256([]byte(sock+"/k8s.io/"+sandbox))))
	must(t, n.Containers(sock, sandbox))
	left := n.Undo()
	if h.Exists("/run/containerd") {
		t.Errorf("/run/containerd left: %q", left)
	}
	if !h.Exists("/var/lib/cni/results/other-"+other+"-eth0") || h.Exists("/var/lib/cni/results/kura-"+sandbox+"-eth0") {
		t.Errorf("wrong CNI results removed")
	}
	if len(left) != 1 || !strings.Contains(left[0], "other-"+other) {
		t.Errorf("report: %q", left)
	}
}
