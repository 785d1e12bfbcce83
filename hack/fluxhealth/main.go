// fluxhealth reads Kubernetes objects as JSON (one object, or a List, on
// stdin) and prints what Flux's health check makes of each with the
// `healthCheckExprs` of the file named by its argument: Flux's own CEL status
// reader (github.com/fluxcd/pkg/runtime/cel, the one kustomize-controller
// polls with), one JSON line per object, {"name", "status", "message",
// "error"}. An expression Flux cannot evaluate is no failure of this program:
// Flux's reader reports it as the status Unknown with the error, and so does
// this. tests/cluster/observability/health.rs feeds it live objects.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/runtime/cel"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

type result struct {
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

// The shipped file: the `healthCheckExprs` of a Kustomization's spec.
type checksFile struct {
	HealthCheckExprs []kustomize.CustomHealthCheck `json:"healthCheckExprs"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fluxhealth HEALTH-CHECKS.yaml < object.json")
		os.Exit(2)
	}
	checks, err := os.ReadFile(os.Args[1])
	if err == nil {
		err = run(checks, os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fluxhealth:", err)
		os.Exit(1)
	}
}

func run(checks []byte, in io.Reader, out io.Writer) error {
	var file checksFile
	if err := yaml.UnmarshalStrict(checks, &file); err != nil {
		return fmt.Errorf("health checks: %w", err)
	}
	if len(file.HealthCheckExprs) == 0 {
		return fmt.Errorf("health checks: no healthCheckExprs")
	}
	newReader, err := cel.NewStatusReader(file.HealthCheckExprs)
	if err != nil {
		return err
	}
	// Reading a given object consults no mapper.
	reader := newReader(meta.NewDefaultRESTMapper(nil))

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
		o := &objects[i]
		rs, err := reader.ReadStatusForObject(context.Background(), nil, o)
		if err != nil {
			return fmt.Errorf("%s: %w", o.GetName(), err)
		}
		res := result{Name: o.GetName(), Status: rs.Status.String(), Message: rs.Message}
		if rs.Error != nil {
			res.Error = rs.Error.Error()
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	return nil
}
