// Package kubeletvolume writes files the way kubelet projects a ConfigMap
// volume (without subPath), so that tests exercise a file watcher against
// the same filesystem dance it meets in a pod: each version in its own
// timestamped directory, a `..data` symlink swapped atomically to the
// newest by renaming `..data_tmp` over it, one symlink per key pointing
// through `..data`, and the previous version removed after the swap.
package kubeletvolume

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Write projects one version of data into dir, creating dir if needed.
func Write(dir string, data map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create volume directory: %w", err)
	}
	version := filepath.Join(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05.000000000"))
	if err := os.Mkdir(version, 0o755); err != nil {
		return fmt.Errorf("create version directory: %w", err)
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(version, k), []byte(v), 0o644); err != nil {
			return fmt.Errorf("write key %s: %w", k, err)
		}
	}
	tmpLink := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(version), tmpLink); err != nil {
		return fmt.Errorf("link ..data_tmp: %w", err)
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Rename(tmpLink, filepath.Join(dir, "..data")); err != nil {
		return fmt.Errorf("swap ..data: %w", err)
	}
	for k := range data {
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				return fmt.Errorf("link key %s: %w", k, err)
			}
		}
	}
	if old != "" {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}
