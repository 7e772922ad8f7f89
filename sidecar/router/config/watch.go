package config

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchFile offers the file at path to the loader now, whenever its
// directory changes, and every poll interval, until ctx ends.
//
// It watches the directory, not the file: kubelet updates a ConfigMap
// volume by writing a new timestamped directory and swapping the ..data
// symlink, so a watch on the file would see it removed and never see the new
// one (and a subPath mount is never updated at all). The poll catches
// anything the watch misses — including a watch that failed to start or was
// lost with its directory — and re-adds the watch when it can.
func WatchFile(ctx context.Context, path string, poll time.Duration, l *Loader) error {
	dir := filepath.Dir(path)
	check := func() {
		data, err := os.ReadFile(path)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) || l.Log.V(1).Enabled() {
				l.Log.Error(err, "reading routing document", "path", path)
			}
			return
		}
		_, _ = l.Offer(SourceFile, data) // the loader logs and counts refusals
	}

	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	watching := false
	addWatch := func() {
		if watching {
			return
		}
		if err := w.Add(dir); err != nil {
			l.Log.V(1).Info("cannot watch routing document directory yet; polling", "dir", dir, "error", err.Error())
			return
		}
		watching = true
	}
	addWatch()
	check()

	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Name == dir && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
				watching = false
			}
			check()
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			l.Log.Error(err, "watching routing document directory", "dir", dir)
		case <-ticker.C:
			addWatch()
			check()
		}
	}
}
