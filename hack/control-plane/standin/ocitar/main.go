// Command ocitar writes a one-layer OCI image layout as a tar, for
// `ctr images import` (scripts/images.sh): images without a Docker engine or a
// registry. The layer holds the given files (their parent directories are
// added); timestamps are zero, so the same inputs give the same image digest.
//
//	ocitar -o out.tar -name kura.local/x:1 -user 65532:65532 \
//	  -entrypoint '["/x","run"]' [-env K=V]... SRC=DST[:MODE]...
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

type blob struct {
	mediaType string
	data      []byte
}

func (b blob) digest() string {
	sum := sha256.Sum256(b.data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (b blob) descriptor() map[string]any {
	return map[string]any{"mediaType": b.mediaType, "digest": b.digest(), "size": len(b.data)}
}

func must(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "ocitar: %v\n", err)
		os.Exit(1)
	}
}

var epoch = time.Unix(0, 0)

func layer(files []string) []byte {
	type entry struct {
		src  string
		mode int64
	}
	entries := map[string]entry{}
	dirs := map[string]bool{}
	for _, f := range files {
		src, dst, ok := strings.Cut(f, "=")
		if !ok || !strings.HasPrefix(dst, "/") {
			must(fmt.Errorf("file %q: want SRC=/DST[:MODE]", f))
		}
		mode := int64(0o755)
		if d, m, ok := strings.Cut(dst, ":"); ok {
			v, err := strconv.ParseInt(m, 8, 64)
			must(err)
			dst, mode = d, v
		}
		entries[strings.TrimPrefix(dst, "/")] = entry{src, mode}
		for d := path.Dir(dst); d != "/"; d = path.Dir(d) {
			dirs[strings.TrimPrefix(d, "/")] = true
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(dirs))
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names) // parents before children
	for _, d := range names {
		must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}))
	}
	names = names[:0]
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		data, err := os.ReadFile(entries[n].src)
		must(err)
		must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: entries[n].mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}))
		_, err = tw.Write(data)
		must(err)
	}
	must(tw.Close())
	return buf.Bytes()
}

func main() {
	out := flag.String("o", "", "output tar")
	name := flag.String("name", "", "image name, e.g. kura.local/kura-standin:1")
	user := flag.String("user", "", "numeric user:group")
	entrypoint := flag.String("entrypoint", "", "entrypoint as a JSON array")
	var env listFlag
	flag.Var(&env, "env", "K=V, repeatable")
	flag.Parse()
	if *out == "" || *name == "" || *entrypoint == "" {
		must(fmt.Errorf("-o, -name and -entrypoint are required"))
	}
	var ep []string
	must(json.Unmarshal([]byte(*entrypoint), &ep))

	l := blob{"application/vnd.oci.image.layer.v1.tar", layer(flag.Args())}
	cfgJSON, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.UTC().Format(time.RFC3339),
		"config":       map[string]any{"User": *user, "Entrypoint": ep, "Env": []string(env)},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{l.digest()}},
	})
	must(err)
	cfg := blob{"application/vnd.oci.image.config.v1+json", cfgJSON}
	manJSON, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        cfg.descriptor(),
		"layers":        []any{l.descriptor()},
	})
	must(err)
	man := blob{"application/vnd.oci.image.manifest.v1+json", manJSON}
	tag := (*name)[strings.LastIndex(*name, ":")+1:]
	desc := man.descriptor()
	desc["annotations"] = map[string]string{"io.containerd.image.name": *name, "org.opencontainers.image.ref.name": tag}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []any{desc}})
	must(err)

	f, err := os.Create(*out + ".tmp")
	must(err)
	tw := tar.NewWriter(f)
	write := func(n string, data []byte) {
		must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(data)), ModTime: epoch}))
		_, err := tw.Write(data)
		must(err)
	}
	must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "blobs/", Mode: 0o755, ModTime: epoch}))
	must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "blobs/sha256/", Mode: 0o755, ModTime: epoch}))
	write("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	for _, b := range []blob{l, cfg, man} {
		write("blobs/sha256/"+strings.TrimPrefix(b.digest(), "sha256:"), b.data)
	}
	write("index.json", index)
	must(tw.Close())
	must(f.Close())
	must(os.Rename(*out+".tmp", *out))
	fmt.Println(man.digest())
}
