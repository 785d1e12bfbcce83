package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The placeholders of the template instance: kura-bench renders a KuraInstance
// with these as its name, namespace and account (`kura-operator render`), and
// the peer substitutes each instance's own. They are distinct and none is part
// of another, so the order of substitution does not matter.
const (
	TokenName      = "kuratplname"
	TokenNamespace = "kuratplns"
	TokenAccount   = "kuratplaccount"
)

// podTemplateHashKey is the annotation the StatefulSet's pod template carries:
// the peer knows its rollout finished when the cached StatefulSet carries the
// rendered one and is rolled out.
const podTemplateHashKey = "kura.dev/pod-template-hash"

// Template is what `kura-operator render` printed for the template instance:
// the children as JSON with the placeholders in them, and what they assume of
// the spec (an instance asking for anything else is an error the peer reports).
type Template struct {
	Objects []string
	// The spec fields the template was rendered with, by name.
	Region, Image, Storage string
}

// Rendered is one instance's children and the revision the peer records.
type Rendered struct {
	Objects         []*unstructured.Unstructured
	Revision        string
	PodTemplateHash string
	Image           string
}

// LoadTemplate reads the render output (YAML documents after comment lines)
// and the spec it was rendered from.
func LoadTemplate(path, region, image, storage string) (*Template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t := &Template{Region: region, Image: image, Storage: storage}
	for _, doc := range splitDocuments(data) {
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if s := strings.TrimSpace(string(j)); s != "" && s != "null" {
			t.Objects = append(t.Objects, s)
		}
	}
	if len(t.Objects) == 0 {
		return nil, fmt.Errorf("%s: no objects", path)
	}
	return t, nil
}

func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if line == "---" {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
			cur.Reset()
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	return append(docs, cur.Bytes())
}

// Render substitutes the instance's name, namespace and account into the
// template. It is the peer's whole rendering: kura-operator's renderer made
// the objects once, so the peer and the operator apply the same objects.
func (t *Template) Render(namespace, name, account string, spec map[string]any) (*Rendered, error) {
	if err := t.check(spec); err != nil {
		return nil, err
	}
	r := strings.NewReplacer(TokenName, name, TokenNamespace, namespace, TokenAccount, account)
	out := &Rendered{Image: t.Image}
	sum := sha256.New()
	for _, text := range t.Objects {
		body := r.Replace(text)
		sum.Write([]byte(body))
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal([]byte(body), &u.Object); err != nil {
			return nil, err
		}
		if u.GetKind() == "StatefulSet" {
			out.PodTemplateHash, _, _ = unstructured.NestedString(u.Object,
				"spec", "template", "metadata", "annotations", podTemplateHashKey)
		}
		out.Objects = append(out.Objects, u)
	}
	out.Revision = hex.EncodeToString(sum.Sum(nil))
	return out, nil
}

func (t *Template) check(spec map[string]any) error {
	region, _, _ := unstructured.NestedString(spec, "region")
	image, _, _ := unstructured.NestedString(spec, "image")
	storage, _, _ := unstructured.NestedString(spec, "storage", "size")
	if region != t.Region || image != t.Image || storage != t.Storage {
		return fmt.Errorf("spec (region %q, image %q, storage %q) is not the template's (%q, %q, %q)",
			region, image, storage, t.Region, t.Image, t.Storage)
	}
	return nil
}

// Wave is kura-operator's wave order (ChildKind::wave): the StatefulSet and
// the Ingress go after what they refer to.
func Wave(u *unstructured.Unstructured) int {
	switch u.GetKind() {
	case "StatefulSet", "Deployment", "Ingress":
		return 1
	}
	return 0
}

// Short is the status's short form of a revision.
func Short(revision string) string {
	if len(revision) > 12 {
		return revision[:12]
	}
	return revision
}
