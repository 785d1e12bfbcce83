// Command kura-standin stands in for the Kura cache in images built without
// Docker (scripts/images.sh), so that instance pods really run on the node of
// `scripts/control-plane.sh up --node`. It is not Kura: it serves only what the
// kubelet and the operator look at.
//
// It reads what the operator's renderer gives the container (crates/kura-core/src/render/children.rs):
// the file named by KURA_CONFIG (kura.json from the instance's ConfigMap, mounted at
// /etc/kura), and KURA_ACCOUNT and KURA_REGION. It listens on the config's
// "listen" address (":8080", the container port named http) and answers the
// readiness and liveness probes on GET /up: 200 while the configuration it was
// started with is valid and agrees with the environment, 503 otherwise, so a pod
// with a broken configuration stays unready as the real cache's would. Its
// answers to /up name the account (header X-Kura-Account, from KURA_ACCOUNT).
// GET / returns the configuration it serves, as JSON.
//
// For the tests of a backend that fails behind a working route: with
// STANDIN_UNAVAILABLE_PATH set (an instance's spec.env, e.g. /health), it
// answers that path with 503 (naming the account too), while /up, its probes'
// path, stays 200, so the pod stays Ready and its route in the ingress
// controller stays: a request through the ingress for that path reaches this
// backend and gets its 503, not the controller's 404 for a pod dropped from
// the endpoints.
package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

type kuraJSON struct {
	Account string   `json:"account"`
	DataDir string   `json:"dataDir"`
	Hosts   []string `json:"hosts"`
	Listen  string   `json:"listen"`
	Region  string   `json:"region"`
}

func load() (kuraJSON, error) {
	var cfg kuraJSON
	path := os.Getenv("KURA_CONFIG")
	if path == "" {
		return cfg, fmt.Errorf("KURA_CONFIG is not set")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, err
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %v", path, err)
	}
	switch {
	case cfg.Listen == "":
		return cfg, fmt.Errorf("%s: no listen address", path)
	case len(cfg.Hosts) == 0:
		return cfg, fmt.Errorf("%s: no hosts", path)
	case cfg.Account != os.Getenv("KURA_ACCOUNT"):
		return cfg, fmt.Errorf("account %q in %s, KURA_ACCOUNT %q", cfg.Account, path, os.Getenv("KURA_ACCOUNT"))
	case cfg.Region != os.Getenv("KURA_REGION"):
		return cfg, fmt.Errorf("region %q in %s, KURA_REGION %q", cfg.Region, path, os.Getenv("KURA_REGION"))
	}
	return cfg, nil
}

func main() {
	cfg, cfgErr := load()
	listen := cfg.Listen
	if listen == "" {
		// Still serve the probes (failing), so the pod reports why it is unready.
		listen = ":8080"
	}
	if cfgErr != nil {
		fmt.Fprintf(os.Stderr, "kura-standin: configuration invalid: %v\n", cfgErr)
	} else {
		fmt.Fprintf(os.Stderr, "kura-standin: account %s region %s hosts %v on %s (a stand-in, not Kura)\n",
			cfg.Account, cfg.Region, cfg.Hosts, listen)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /up", func(w http.ResponseWriter, _ *http.Request) {
		// Who answers: a check through an ingress can tell this instance's
		// answer from another's (the operator's endpoint check, src/endpoint.rs).
		w.Header().Set("X-Kura-Account", os.Getenv("KURA_ACCOUNT"))
		if cfgErr != nil {
			http.Error(w, cfgErr.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if path := os.Getenv("STANDIN_UNAVAILABLE_PATH"); path != "" && path != "/up" && path != "/" {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Kura-Account", os.Getenv("KURA_ACCOUNT"))
			http.Error(w, "unavailable (STANDIN_UNAVAILABLE_PATH)", http.StatusServiceUnavailable)
		})
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"standIn": true, "config": cfg, "valid": cfgErr == nil})
	})
	// PID 1 in its container: exit on SIGTERM at once instead of waiting for the
	// kubelet's grace period to run out.
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		os.Exit(0)
	}()
	if err := http.ListenAndServe(listen, mux); err != nil {
		fmt.Fprintf(os.Stderr, "kura-standin: %v\n", err)
		os.Exit(1)
	}
}
