package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
)

// Host is everything this program does to the machine: commands (ip, iptables,
// nft, umount), run with an argument vector and never through a shell, and a
// few file operations (sysctls in /proc/sys, /proc/self/mountinfo, the
// journaled directories and cgroups). The tests use a fake.
type Host interface {
	// Run runs a command; the error carries its stderr.
	Run(name string, args ...string) (string, error)
	// Has reports whether a command is installed.
	Has(name string) bool
	ReadFile(path string) (string, error)
	WriteFile(path, data string) error
	// Lstat: whether path exists (a dangling symlink does).
	Exists(path string) bool
	ReadDir(path string) ([]DirEntry, error)
	Readlink(path string) (string, error)
	// Remove removes a file, a symlink or an empty directory: never recursively.
	Remove(path string) error
}

// DirEntry is one entry of a directory.
type DirEntry struct {
	Name string
	Dir  bool
	Link bool
}

type realHost struct{}

func (realHost) Run(name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func (realHost) Has(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

func (realHost) ReadFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

func (realHost) WriteFile(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (realHost) Exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func (realHost) ReadDir(path string) ([]DirEntry, error) {
	es, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	out := make([]DirEntry, 0, len(es))
	for _, e := range es {
		out = append(out, DirEntry{Name: e.Name(), Dir: e.IsDir(), Link: e.Type()&fs.ModeSymlink != 0})
	}
	return out, nil
}

func (realHost) Readlink(path string) (string, error) { return os.Readlink(path) }

func (realHost) Remove(path string) error { return os.Remove(path) }
