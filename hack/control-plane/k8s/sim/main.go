// Command kura-sim plays the two parts of a cluster that cannot run on a
// machine without a container runtime, and says so in every object it touches:
//
//   - a simulated kubelet: every Pod is marked Running and Ready through the
//     pods/status subresource, so the real StatefulSet/Deployment controllers in
//     kube-controller-manager compute availability exactly as they would in a
//     cluster. Pods of a real node are left alone (scripts/control-plane.sh up
//     --node runs a kubelet): a pod bound to a registered Node belongs to that
//     node's kubelet, and while any Node is registered an unbound pod waits for
//     the real scheduler. Only pods bound to a node name no Node has are then
//     still simulated. Namespaces labelled sim.kura.dev/kubelet=off are left alone, so a
//     test can keep a workload unavailable. A namespace can also ask for a slow
//     start (annotation sim.kura.dev/ready-delay, a Go duration such as "2s",
//     counted from the pod's creation) and for a broken release (annotation
//     sim.kura.dev/never-ready: pods whose spec, as JSON, contains this text
//     never become Ready: an image tag, a resource amount), so rollouts take
//     time and fail on purpose.
//   - a simulated ingress controller, for tests that run without a real one
//     (a plane without a node has none): it serves every IngressClass whose
//     spec.controller equals --ingress-controller (kura.dev/sim-ingress, a name
//     no real controller uses), and gives each Ingress of such a class a
//     loopback address in status.loadBalancer, which nothing behind it answers.
//     Ingresses of any other class get no address from it, as they would in a
//     cluster where that controller is absent: on a node plane the shared class
//     kura-shared is served by a real controller (Traefik, controller
//     traefik.io/ingress-controller, see scripts/control-plane-node.sh), whose
//     Ingresses only it gives an address, and only while it runs.
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

	corev1 "k8s.io/api/core/v1"
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
	// The node's real ingress controller (Traefik): never simulated.
	realIngressController = "traefik.io/ingress-controller"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the apiserver to serve")
	ingressController := flag.String("ingress-controller", "kura.dev/sim-ingress",
		"IngressClass spec.controller value this simulated ingress controller serves")
	flag.Parse()
	if *ingressController == realIngressController {
		fmt.Fprintf(os.Stderr, "kura-sim: --ingress-controller %s is a real controller's name: the simulation serves no class a real controller serves\n", *ingressController)
		os.Exit(1)
	}

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
		nodes:      factory.Core().V1().Nodes().Lister(),
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
	// A node registering or leaving changes whose pods are simulated.
	factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if n, ok := obj.(*corev1.Node); ok {
				klog.Infof("kura-sim: real node %s registered: its pods, and pods waiting for the scheduler, are left to it", n.Name)
			}
			sim.requeueAll()
		},
		DeleteFunc: func(interface{}) { sim.requeueAll() },
	})
	factory.Networking().V1().IngressClasses().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(interface{}) { sim.requeueAll() },
		UpdateFunc: func(_, _ interface{}) { sim.requeueAll() },
	})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	klog.Infof("kura-sim: simulating kubelet (for pods of no real node) and ingress controller %q (no real controller: classes of %q are a real one's)", sim.controller, realIngressController)

	go sim.run(ctx, sim.podQueue, sim.syncPod)
	go sim.run(ctx, sim.ingQueue, sim.syncIngress)
	<-ctx.Done()
	sim.podQueue.ShutDown()
	sim.ingQueue.ShutDown()
}
