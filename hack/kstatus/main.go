// kstatus reads Kubernetes objects as JSON (one object, or a List, on stdin)
// and prints what sigs.k8s.io/cli-utils' kstatus, the status library Flux's
// health checks and kpt use, computes for each: one JSON line per object,
// {"name", "status", "message"}. tests/cluster/observability/health.rs feeds it live objects.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type result struct {
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	var obj unstructured.Unstructured
	if err := obj.UnmarshalJSON(data); err != nil {
		return err
	}
	objects := []unstructured.Unstructured{obj}
	if obj.IsList() {
		list, err := obj.ToList()
		if err != nil {
			return err
		}
		objects = list.Items
	}
	enc := json.NewEncoder(out)
	for i := range objects {
		res, err := status.Compute(&objects[i])
		if err != nil {
			return fmt.Errorf("%s: %w", objects[i].GetName(), err)
		}
		if err := enc.Encode(result{objects[i].GetName(), res.Status.String(), res.Message}); err != nil {
			return err
		}
	}
	return nil
}
