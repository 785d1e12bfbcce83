package main

import (
	"bytes"
	"strings"
	"testing"
)

// The library's reading of the shapes the operator writes, without a cluster
// (tests/cluster/observability/health.rs reads live objects).
func TestStatusOfEachShape(t *testing.T) {
	cases := []struct{ name, object, want string }{
		{"no status yet", `{"apiVersion":"kura.dev/v1alpha1","kind":"KuraInstance","metadata":{"name":"a","generation":1}}`, "Current"},
		{"old generation", `{"apiVersion":"kura.dev/v1alpha1","kind":"KuraInstance","metadata":{"name":"a","generation":2},"status":{"observedGeneration":1}}`, "InProgress"},
		{"stalled", `{"apiVersion":"kura.dev/v1alpha1","kind":"KuraInstance","metadata":{"name":"a","generation":1},"status":{"observedGeneration":1,"conditions":[{"type":"Stalled","status":"True","reason":"R","message":"m"}]}}`, "Failed"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		if err := run(strings.NewReader(c.object), &out); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), `"status":"`+c.want+`"`) {
			t.Errorf("%s: %s, want %s", c.name, out.String(), c.want)
		}
	}
}
