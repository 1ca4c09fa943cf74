package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// imageConfig is what the runtime needs to start the image, beyond its files.
type imageConfig struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	User       string
	Labels     map[string]string
	OS         string
	Arch       string
}

// buildImage makes a one-layer image from the planned entries. The config's creation time and
// the layer's history are pinned to epoch so the digest depends only on the inputs.
// go-containerregistry opens the layer several times (digest, diff ID, writing); each open
// streams a fresh, identical tar.
func buildImage(entries []entry, cfg imageConfig) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeTar(pw, entries)) }()
		return pr, nil
	})
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "nezha imagebuilder"},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: epoch}
	cf.OS, cf.Architecture = cfg.OS, cfg.Arch
	cf.Config = v1.Config{
		Entrypoint: cfg.Entrypoint,
		Cmd:        cfg.Cmd,
		Env:        cfg.Env,
		WorkingDir: cfg.WorkingDir,
		User:       cfg.User,
		Labels:     cfg.Labels,
	}
	return mutate.ConfigFile(img, cf)
}

// writeArchive writes img as a docker-archive tarball (what `ctr images import` reads) tagged
// tag, atomically: through a temporary file in the target's directory, renamed at the end.
func writeArchive(path, tag string, img v1.Image) error {
	ref, err := parseTag(tag)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if err := tarball.Write(ref, img, tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// CreateTemp makes the file 0600; an image archive is not a secret.
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// parseTag accepts REPOSITORY:TAG with or without a registry host ("nezha/operator:0.1.0" as the
// chart names images, or "nezha.local/pause:1"); the tag itself must be explicit, never an
// implied "latest" that a pod spec would not match.
func parseTag(tag string) (name.Tag, error) {
	ref, err := name.NewTag(tag)
	if err != nil {
		return name.Tag{}, fmt.Errorf("--tag %q: %w (want REPOSITORY:TAG, e.g. nezha/operator:0.1.0)", tag, err)
	}
	if i := strings.LastIndex(tag, ":"); i < 0 || strings.Contains(tag[i:], "/") {
		return name.Tag{}, fmt.Errorf("--tag %q: no tag after the repository (want REPOSITORY:TAG, e.g. nezha/operator:0.1.0)", tag)
	}
	return ref, nil
}
