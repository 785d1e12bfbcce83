package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An excerpt of `kura-operator render` output for the template instance.
const renderOutput = `# instance kuratplname: revision abc (pod template 9cecbd04b86970a9)
#   ConfigMap kuratplns/kuratplname-config hash def
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: kuratplname
  namespace: kuratplns
  labels:
    kura.dev/account: kuratplaccount
spec:
  template:
    metadata:
      annotations:
        kura.dev/pod-template-hash: 9cecbd04b86970a9
---
apiVersion: v1
data:
  kura.json: '{"account":"kuratplaccount","hosts":["kuratplaccount.bench.v1.bench.kura.test"]}'
kind: ConfigMap
metadata:
  name: kuratplname-config
  namespace: kuratplns
`

func load(t *testing.T) *Template {
	t.Helper()
	path := filepath.Join(t.TempDir(), "template.yaml")
	if err := os.WriteFile(path, []byte(renderOutput), 0o600); err != nil {
		t.Fatal(err)
	}
	tpl, err := LoadTemplate(path, "bench", "registry.example/kura:1.0.0", "1Gi")
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

func spec() map[string]any {
	return map[string]any{
		"region": "bench", "image": "registry.example/kura:1.0.0",
		"storage": map[string]any{"size": "1Gi"},
	}
}

func TestRenderSubstitutesNameNamespaceAccountAndHosts(t *testing.T) {
	r, err := load(t).Render("ns-a", "kb-00007", "acct-7", spec())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Objects) != 2 {
		t.Fatalf("%d objects, want 2", len(r.Objects))
	}
	sts, cm := r.Objects[0], r.Objects[1]
	if sts.GetName() != "kb-00007" || sts.GetNamespace() != "ns-a" || sts.GetLabels()["kura.dev/account"] != "acct-7" {
		t.Errorf("StatefulSet metadata not substituted: %v", sts.Object["metadata"])
	}
	if cm.GetName() != "kb-00007-config" {
		t.Errorf("ConfigMap name %q", cm.GetName())
	}
	data := cm.Object["data"].(map[string]any)["kura.json"].(string)
	if !strings.Contains(data, `"hosts":["acct-7.bench.v1.bench.kura.test"]`) || strings.Contains(data, "kuratpl") {
		t.Errorf("ConfigMap data not substituted: %s", data)
	}
	if r.PodTemplateHash != "9cecbd04b86970a9" {
		t.Errorf("pod template hash %q", r.PodTemplateHash)
	}
	if Wave(sts) != 1 || Wave(cm) != 0 {
		t.Errorf("waves: StatefulSet %d, ConfigMap %d", Wave(sts), Wave(cm))
	}
}

func TestRevisionDiffersBetweenInstancesAndIsStable(t *testing.T) {
	tpl := load(t)
	a, _ := tpl.Render("ns", "a", "a", spec())
	a2, _ := tpl.Render("ns", "a", "a", spec())
	b, _ := tpl.Render("ns", "b", "b", spec())
	if a.Revision != a2.Revision || a.Revision == b.Revision {
		t.Errorf("revisions a %s, a again %s, b %s", a.Revision, a2.Revision, b.Revision)
	}
}

func TestASpecOtherThanTheTemplatesIsRefused(t *testing.T) {
	s := spec()
	s["image"] = "registry.example/kura:2.0.0"
	if _, err := load(t).Render("ns", "a", "a", s); err == nil {
		t.Error("rendered an instance whose image is not the template's")
	}
}

func TestTheCacheHoldsEachNamedNamespace(t *testing.T) {
	got := scoped("a, b,,c")
	if len(got) != 3 {
		t.Fatalf("namespaces %v", got)
	}
	for _, ns := range []string{"a", "b", "c"} {
		if _, ok := got[ns]; !ok {
			t.Errorf("%s missing from %v", ns, got)
		}
	}
}
