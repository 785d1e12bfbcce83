// kura-peer: a minimal controller-runtime operator reconciling KuraInstances
// into the same children as kura-operator, the peer kura-bench measures the
// operator against (docs/benchmarks.md, "References").
//
// What a platform team would otherwise write: one controller, a
// cache scoped to its namespaces of KuraInstances and StatefulSets with managedFields
// stripped, server-side apply of every child in kura-operator's two waves, a
// status recording the applied revision, then Ready when the StatefulSet has
// rolled out. Events only on errors (with --kura-events, one Normal "Applied"
// per apply, as kura-operator publishes).
//
// It does not render by itself, deliberately: kura-bench gives it the output of
// `kura-operator render` for a template instance (--template), and the peer
// substitutes each instance's name, namespace and account (and so its hosts).
// Both then apply the very same objects, and the comparison measures the
// controllers, not two renderers. The template file is polled; a new one (a
// fleet-wide change) re-renders every instance, as kura-operator's
// configuration file does.
package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

func main() {
	var (
		namespaces  = flag.String("namespace", "", "the namespaces watched and reconciled, comma-separated (the cache holds only those)")
		template    = flag.String("template", "", "`kura-operator render` output of the template instance (name kuratplname, namespace kuratplns, account kuratplaccount)")
		region      = flag.String("region", "bench", "the template instance's spec.region")
		image       = flag.String("image", "registry.example/kura:1.0.0", "the template instance's spec.image")
		storage     = flag.String("storage", "1Gi", "the template instance's spec.storage.size")
		concurrency = flag.Int("concurrency", 16, "MaxConcurrentReconciles: instances in flight")
		kuraEvents  = flag.Bool("kura-events", false, "publish a Normal Applied Event per apply, as kura-operator does (default: Events only on errors)")
		qps         = flag.Float64("qps", -1, "client-side rate limit (requests per second; negative: none, as kura-operator has none)")
		burst       = flag.Int("burst", 0, "client-side burst (with --qps)")
		poll        = flag.Duration("poll", time.Second, "how often the template file is read for a change")
	)
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("kura-peer")
	if *namespaces == "" || *template == "" {
		log.Info("--namespace and --template are required")
		os.Exit(2)
	}
	tpl, err := LoadTemplate(*template, *region, *image, *storage)
	if err != nil {
		log.Error(err, "reading the template")
		os.Exit(1)
	}
	templates := &Templates{}
	templates.Set(tpl)

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	cfg.UserAgent = "kura-peer"
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Cache: cache.Options{
			DefaultNamespaces: scoped(*namespaces),
			DefaultTransform:  cache.TransformStripManagedFields(),
		},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	r := &Reconciler{
		Client:     mgr.GetClient(),
		Templates:  templates,
		Recorder:   mgr.GetEventRecorder("kura-peer"),
		KuraEvents: *kuraEvents,
	}
	changed := make(chan event.GenericEvent)
	err = ctrl.NewControllerManagedBy(mgr).
		For(newInstance()).
		Owns(&appsv1.StatefulSet{}).
		WatchesRawSource(source.Channel(changed, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: *concurrency}).
		Complete(r)
	if err != nil {
		log.Error(err, "creating the controller")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	go watchTemplate(ctx, mgr.GetClient(), *template, *poll, templates, changed, *region, *image, *storage)
	log.Info("starting", "namespaces", *namespaces, "concurrency", *concurrency, "kuraEvents", *kuraEvents)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}

// scoped is the cache's namespaces: each of the comma-separated list.
func scoped(list string) map[string]cache.Config {
	out := map[string]cache.Config{}
	for _, ns := range strings.Split(list, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			out[ns] = cache.Config{}
		}
	}
	return out
}

// watchTemplate polls the template file; a changed one is put in force and
// every instance in the cache enqueued.
func watchTemplate(ctx context.Context, c client.Client, path string, every time.Duration,
	templates *Templates, changed chan<- event.GenericEvent, region, image, storage string) {
	log := ctrl.Log.WithName("template")
	last, _ := os.ReadFile(path)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now, err := os.ReadFile(path)
		if err != nil || bytes.Equal(now, last) {
			continue
		}
		tpl, err := LoadTemplate(path, region, image, storage)
		if err != nil {
			log.Error(err, "new template refused; the previous one stays")
			continue
		}
		last = now
		templates.Set(tpl)
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(instanceGVK.GroupVersion().WithKind(instanceGVK.Kind + "List"))
		if err := c.List(ctx, list); err != nil {
			log.Error(err, "listing the instances to re-render")
			continue
		}
		log.Info("template changed", "instances", len(list.Items))
		for i := range list.Items {
			changed <- event.GenericEvent{Object: &list.Items[i]}
		}
	}
}
