package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// FieldManager is the peer's own, so the audit log and managedFields tell it
// from kura-operator.
const FieldManager = "kura-peer"

var instanceGVK = schema.GroupVersionKind{Group: "kura.dev", Version: "v1alpha1", Kind: "KuraInstance"}

func newInstance() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(instanceGVK)
	return u
}

// Templates holds the template in force; the file is polled, as kura-operator
// polls its configuration file, and a new one re-renders every instance.
type Templates struct {
	mu      sync.RWMutex
	current *Template
}

func (t *Templates) Current() *Template {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.current
}

func (t *Templates) Set(tpl *Template) {
	t.mu.Lock()
	t.current = tpl
	t.mu.Unlock()
}

// Reconciler: render, apply in two waves, record the applied revision, then
// Ready once the StatefulSet rolled out. No other decisions.
type Reconciler struct {
	client.Client
	Templates  *Templates
	Recorder   recorder.EventRecorder
	KuraEvents bool
}

func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	inst := newInstance()
	if err := r.Get(ctx, req.NamespacedName, inst); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if inst.GetDeletionTimestamp() != nil {
		return ctrl.Result{}, nil
	}
	spec, _, _ := unstructured.NestedMap(inst.Object, "spec")
	account, _, _ := unstructured.NestedString(spec, "account")
	rendered, err := r.Templates.Current().Render(inst.GetNamespace(), inst.GetName(), account, spec)
	if err != nil {
		// A spec the template cannot serve: said once, not retried until it changes.
		r.warn(inst, "RenderFailed", err)
		return ctrl.Result{}, nil
	}
	applied, _, _ := unstructured.NestedString(inst.Object, "status", "appliedRevision")
	observed, _, _ := unstructured.NestedInt64(inst.Object, "status", "observedGeneration")
	phase, _, _ := unstructured.NestedString(inst.Object, "status", "phase")
	if applied != rendered.Revision || observed != inst.GetGeneration() {
		if err := r.apply(ctx, inst, rendered); err != nil {
			r.warn(inst, "ApplyFailed", err)
			return ctrl.Result{}, err
		}
		if err := r.patchStatus(ctx, inst, rendered, "Activating"); err != nil {
			r.warn(inst, "StatusWriteFailed", err)
			return ctrl.Result{}, err
		}
		if r.KuraEvents {
			r.Recorder.Eventf(inst, nil, corev1.EventTypeNormal, "Applied", "Reconcile",
				"applied revision %s", Short(rendered.Revision))
		}
		phase = "Activating"
	}
	if phase == "Ready" || !r.rolledOut(ctx, inst, rendered) {
		return ctrl.Result{}, nil
	}
	if err := r.patchStatus(ctx, inst, rendered, "Ready"); err != nil {
		r.warn(inst, "StatusWriteFailed", err)
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// apply sends every child by server-side apply, a wave at a time, the objects
// of a wave side by side.
func (r *Reconciler) apply(ctx context.Context, inst *unstructured.Unstructured, rendered *Rendered) error {
	owner := map[string]any{
		"apiVersion": instanceGVK.GroupVersion().String(), "kind": instanceGVK.Kind,
		"name": inst.GetName(), "uid": string(inst.GetUID()),
		"controller": true, "blockOwnerDeletion": true,
	}
	for wave := 0; wave <= 1; wave++ {
		var wg sync.WaitGroup
		errs := make(chan error, len(rendered.Objects))
		for _, obj := range rendered.Objects {
			if Wave(obj) != wave {
				continue
			}
			_ = unstructured.SetNestedSlice(obj.Object, []any{owner}, "metadata", "ownerReferences")
			wg.Add(1)
			go func(obj *unstructured.Unstructured) {
				defer wg.Done()
				err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj),
					client.FieldOwner(FieldManager), client.ForceOwnership)
				if err != nil {
					errs <- fmt.Errorf("applying %s %s: %w", obj.GetKind(), obj.GetName(), err)
				}
			}(obj)
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// rolledOut: the cached StatefulSet carries the rendered pod template and
// every replica is updated and ready.
func (r *Reconciler) rolledOut(ctx context.Context, inst *unstructured.Unstructured, rendered *Rendered) bool {
	var sts appsv1.StatefulSet
	if err := r.Get(ctx, types.NamespacedName{Namespace: inst.GetNamespace(), Name: inst.GetName()}, &sts); err != nil {
		return false
	}
	want := int32(1)
	if sts.Spec.Replicas != nil {
		want = *sts.Spec.Replicas
	}
	s := sts.Status
	return sts.Spec.Template.Annotations[podTemplateHashKey] == rendered.PodTemplateHash &&
		s.ObservedGeneration == sts.Generation && s.ReadyReplicas == want &&
		s.UpdatedReplicas == want && s.CurrentRevision == s.UpdateRevision
}

// patchStatus writes the revision and the phase (a merge patch, as
// kura-operator writes its status).
func (r *Reconciler) patchStatus(ctx context.Context, inst *unstructured.Unstructured, rendered *Rendered, phase string) error {
	body, err := json.Marshal(map[string]any{"status": statusFor(inst.GetGeneration(), rendered, phase, time.Now())})
	if err != nil {
		return err
	}
	return r.Status().Patch(ctx, inst, client.RawPatch(types.MergePatchType, body))
}

// statusFor is the status of an instance whose children carry `rendered`.
func statusFor(generation int64, rendered *Rendered, phase string, now time.Time) map[string]any {
	ready, reason, message := "False", "Activating", "applied; waiting for the StatefulSet to roll out"
	if phase == "Ready" {
		ready, reason, message = "True", "Ready", "the StatefulSet rolled out"
	}
	return map[string]any{
		"observedGeneration":   generation,
		"phase":                phase,
		"desiredRevision":      rendered.Revision,
		"desiredRevisionShort": Short(rendered.Revision),
		"appliedRevision":      rendered.Revision,
		"appliedRevisionShort": Short(rendered.Revision),
		"appliedImage":         rendered.Image,
		"conditions": []any{map[string]any{
			"type": "Ready", "status": ready, "reason": reason, "message": message,
			"observedGeneration": generation, "lastTransitionTime": now.UTC().Format(time.RFC3339),
		}},
	}
}

// warn publishes a Warning Event: the peer's only Events unless --kura-events.
func (r *Reconciler) warn(inst *unstructured.Unstructured, reason string, err error) {
	r.Recorder.Eventf(inst, nil, corev1.EventTypeWarning, reason, "Reconcile", "%s", err.Error())
}
