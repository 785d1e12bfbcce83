package main

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	netlisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

type simulator struct {
	client     kubernetes.Interface
	controller string
	pods       corelisters.PodLister
	namespaces corelisters.NamespaceLister
	nodes      corelisters.NodeLister
	ingresses  netlisters.IngressLister
	classes    netlisters.IngressClassLister
	podQueue   workqueue.TypedRateLimitingInterface[string]
	ingQueue   workqueue.TypedRateLimitingInterface[string]
}

func (s *simulator) run(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) error) {
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		if err := sync(ctx, key); err != nil && !apierrors.IsNotFound(err) {
			klog.Warningf("kura-sim: %s: %v", key, err)
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

func (s *simulator) requeueAll() {
	if pods, err := s.pods.List(labels.Everything()); err == nil {
		for _, p := range pods {
			s.podQueue.Add(p.Namespace + "/" + p.Name)
		}
	}
	if ings, err := s.ingresses.List(labels.Everything()); err == nil {
		for _, i := range ings {
			s.ingQueue.Add(i.Namespace + "/" + i.Name)
		}
	}
}

// onRealNode: the pod is a real kubelet's (bound to a registered Node), or will
// be once the scheduler binds it (unbound while any Node is registered). Marking
// it Ready would lie about a real container and race its kubelet.
func (s *simulator) onRealNode(pod *corev1.Pod) bool {
	if pod.Spec.NodeName == "" {
		nodes, err := s.nodes.List(labels.Everything())
		return err != nil || len(nodes) > 0
	}
	_, err := s.nodes.Get(pod.Spec.NodeName)
	return err == nil
}

func (s *simulator) kubeletOff(namespace string) bool {
	ns, err := s.namespaces.Get(namespace)
	return err != nil || ns.Labels[kubeletOffLabel] == "off"
}

// readiness is what a namespace's annotations ask of the simulated kubelet:
// a delay before a pod becomes Ready (a slow start), and a text whose pods
// never become Ready (a broken release): pods whose spec, as JSON, contains it.
func (s *simulator) readiness(namespace string) (delay time.Duration, neverReady string) {
	ns, err := s.namespaces.Get(namespace)
	if err != nil {
		return 0, ""
	}
	if d, err := time.ParseDuration(ns.Annotations[readyDelayAnnotation]); err == nil {
		delay = d
	}
	return delay, ns.Annotations[neverReadyAnnotation]
}

// syncPod plays the kubelet: a pod of no real node that is not being deleted is reported Running
// and Ready, once (after the namespace's ready delay; never for an image the
// namespace marks as never ready).
func (s *simulator) syncPod(ctx context.Context, key string) error {
	namespace, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := s.pods.Pods(namespace).Get(name)
	if err != nil || pod.DeletionTimestamp != nil || s.kubeletOff(namespace) || s.onRealNode(pod) || podReady(pod) {
		return err
	}
	delay, neverReady := s.readiness(namespace)
	if neverReady != "" {
		if spec, err := json.Marshal(pod.Spec); err == nil && strings.Contains(string(spec), neverReady) {
			return nil
		}
	}
	if wait := time.Until(pod.CreationTimestamp.Add(delay)); wait > 0 {
		s.podQueue.AddAfter(key, wait)
		return nil
	}
	pod = pod.DeepCopy()
	now := metav1.NewTime(time.Now())
	pod.Status.Phase = corev1.PodRunning
	pod.Status.StartTime = &now
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now,
			Reason: "Simulated", Message: "marked ready by kura-sim (simulated kubelet)"},
	}
	statuses := make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		statuses = append(statuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	pod.Status.ContainerStatuses = statuses
	_, err = s.client.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{FieldManager: "kura-sim-kubelet"})
	return err
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// syncIngress plays an ingress controller for the classes whose controller is ours.
func (s *simulator) syncIngress(ctx context.Context, key string) error {
	namespace, name, _ := cache.SplitMetaNamespaceKey(key)
	ing, err := s.ingresses.Ingresses(namespace).Get(name)
	if err != nil || ing.DeletionTimestamp != nil || !s.serves(ing) {
		return err
	}
	lb := ing.Status.LoadBalancer.Ingress
	if len(lb) == 1 && lb[0].IP == loopbackAddress {
		return nil
	}
	ing = ing.DeepCopy()
	ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: loopbackAddress}}
	_, err = s.client.NetworkingV1().Ingresses(namespace).UpdateStatus(ctx, ing, metav1.UpdateOptions{FieldManager: "kura-sim-ingress"})
	return err
}

func (s *simulator) serves(ing *networkingv1.Ingress) bool {
	if ing.Spec.IngressClassName == nil {
		return false
	}
	class, err := s.classes.Get(*ing.Spec.IngressClassName)
	return err == nil && class.Spec.Controller == s.controller
}

func ptr[T any](v T) *T { return &v }
