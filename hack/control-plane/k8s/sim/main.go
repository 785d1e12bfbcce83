// Command kura-sim plays the two parts of a cluster that cannot run on a
// machine without a container runtime, and says so in every object it touches:
//
//   - a simulated kubelet: every Pod is marked Running and Ready through the
//     pods/status subresource, so the real StatefulSet/Deployment controllers in
//     kube-controller-manager compute availability exactly as they would in a
//     cluster. Namespaces labelled sim.kura.dev/kubelet=off are left alone, so a
//     test can keep a workload unavailable. A namespace can also ask for a slow
//     start (annotation sim.kura.dev/ready-delay, a Go duration such as "2s",
//     counted from the pod's creation) and for a broken release (annotation
//     sim.kura.dev/never-ready: pods whose spec, as JSON, contains this text
//     never become Ready: an image tag, a resource amount), so rollouts take
//     time and fail on purpose.
//   - a simulated ingress controller: it serves every IngressClass whose
//     spec.controller equals --ingress-controller, and gives each Ingress of such a
//     class a loopback address in status.loadBalancer. Ingresses of any other class
//     get no address, as they would in a cluster where that controller is absent.
//
// It only ever writes status subresources and talks to the apiserver given by
// --kubeconfig.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

const (
	kubeletOffLabel      = "sim.kura.dev/kubelet"
	readyDelayAnnotation = "sim.kura.dev/ready-delay"
	neverReadyAnnotation = "sim.kura.dev/never-ready"
	loopbackAddress      = "127.0.0.1"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the apiserver to serve")
	ingressController := flag.String("ingress-controller", "kura.dev/sim-ingress",
		"IngressClass spec.controller value this simulated ingress controller serves")
	flag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kura-sim: kubeconfig: %v\n", err)
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = 200, 400
	client := kubernetes.NewForConfigOrDie(cfg)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	sim := &simulator{
		client:     client,
		controller: *ingressController,
		pods:       factory.Core().V1().Pods().Lister(),
		namespaces: factory.Core().V1().Namespaces().Lister(),
		ingresses:  factory.Networking().V1().Ingresses().Lister(),
		classes:    factory.Networking().V1().IngressClasses().Lister(),
		podQueue:   workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		ingQueue:   workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
	}
	enqueue := func(q workqueue.TypedRateLimitingInterface[string]) cache.ResourceEventHandlerFuncs {
		add := func(obj interface{}) {
			if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				q.Add(key)
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, n interface{}) { add(n) }}
	}
	factory.Core().V1().Pods().Informer().AddEventHandler(enqueue(sim.podQueue))
	factory.Networking().V1().Ingresses().Informer().AddEventHandler(enqueue(sim.ingQueue))
	// A namespace or class change can make objects newly eligible: requeue them all.
	factory.Core().V1().Namespaces().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, _ interface{}) { sim.requeueAll() },
	})
	factory.Networking().V1().IngressClasses().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(interface{}) { sim.requeueAll() },
		UpdateFunc: func(_, _ interface{}) { sim.requeueAll() },
	})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	klog.Infof("kura-sim: simulating kubelet and ingress controller %q", sim.controller)

	go sim.run(ctx, sim.podQueue, sim.syncPod)
	go sim.run(ctx, sim.ingQueue, sim.syncIngress)
	<-ctx.Done()
	sim.podQueue.ShutDown()
	sim.ingQueue.ShutDown()
}
