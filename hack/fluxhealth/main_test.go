package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The shipped health checks as Flux's CEL reader applies them to the shapes
// the operator writes, without a cluster (tests/cluster/observability/health.rs reads live
// objects).
func TestShippedChecksOnEachShape(t *testing.T) {
	checks, err := os.ReadFile("../../charts/kura-operator/files/flux-health-checks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const (
		ready   = `{"type":"Ready","status":"True","reason":"Active","message":"m"}`
		stalled = `{"type":"Stalled","status":"True","reason":"RetryBudgetExhausted","message":"m"}`
		paused  = `{"type":"Reconciling","status":"False","reason":"Paused","message":"m"},{"type":"Stalled","status":"False","reason":"Paused"}`
	)
	object := func(kind, spec, status string) string {
		o := `{"apiVersion":"kura.dev/v1alpha1","kind":"` + kind + `","metadata":{"name":"a","generation":2},"spec":` + spec
		if status != "" {
			o += `,"status":` + status
		}
		return o + "}"
	}
	expiredPause := `{"paused":true,"pause":{"until":"2026-01-01T00:00:00Z"}}`
	cases := []struct{ name, object, want string }{
		// Flux's CEL has no `status` to read: its reader says Unknown, and
		// Flux's wait goes on as for InProgress.
		{"no status yet", object("KuraInstance", `{}`, ""), "Unknown"},
		{"no conditions yet", object("KuraInstance", `{}`, `{"observedGeneration":2}`), "InProgress"},
		{"old generation", object("KuraInstance", `{}`, `{"observedGeneration":1,"conditions":[`+ready+`]}`), "InProgress"},
		{"applying", object("KuraInstance", `{}`, `{"observedGeneration":2,"phase":"Applying","conditions":[{"type":"Reconciling","status":"True","reason":"Applying"}]}`), "InProgress"},
		{"ready", object("KuraInstance", `{}`, `{"observedGeneration":2,"phase":"Ready","conditions":[`+ready+`]}`), "Current"},
		{"stalled", object("KuraInstance", `{}`, `{"observedGeneration":2,"phase":"Stalled","conditions":[`+stalled+`]}`), "Failed"},
		{"paused", object("KuraInstance", `{"paused":true}`, `{"observedGeneration":2,"phase":"Paused","conditions":[`+paused+`]}`), "Current"},
		{"pause expired, stalled", object("KuraInstance", expiredPause, `{"observedGeneration":2,"phase":"Stalled","conditions":[`+stalled+`]}`), "Failed"},
		{"pause expired, ready", object("KuraInstance", expiredPause, `{"observedGeneration":2,"phase":"Ready","conditions":[`+ready+`]}`), "Current"},
		{"gateway without status", object("KuraGateway", `{}`, ""), "Unknown"},
		{"gateway ready", object("KuraGateway", `{}`, `{"observedGeneration":2,"conditions":[`+ready+`]}`), "Current"},
		{"gateway stalled", object("KuraGateway", `{}`, `{"observedGeneration":2,"conditions":[`+stalled+`]}`), "Failed"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		if err := run(checks, strings.NewReader(c.object), &out); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got result
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v: %s", c.name, err, out.String())
		}
		if got.Status != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, got.Status, got.Error, c.want)
		}
	}
}

// A file Flux would refuse is refused here too, not read as no checks.
func TestRefusesBadChecks(t *testing.T) {
	for _, checks := range []string{
		"healthCheckExprs: []",
		"healthCheckExprs:\n  - apiVersion: kura.dev/v1alpha1\n    kind: KuraInstance\n    current: \"status.conditions.exists(\"\n",
		"healthCheckExprs:\n  - apiVersion: kura.dev/v1alpha1\n    kind: KuraInstance\n    curent: \"true\"\n",
	} {
		var out bytes.Buffer
		if err := run([]byte(checks), strings.NewReader(`{}`), &out); err == nil {
			t.Errorf("accepted %q", checks)
		}
	}
}
