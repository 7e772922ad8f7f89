package config

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
)

// WatchFile offers the file at path to the loader now, whenever its
// directory changes, and every poll interval, until ctx ends.
func WatchFile(ctx context.Context, path string, poll time.Duration, l *Loader) error {
	return WatchDir(ctx, filepath.Dir(path), poll, l.Log, func() {
		data, err := os.ReadFile(path)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) || l.Log.V(1).Enabled() {
				l.Log.Error(err, "reading routing document", "path", path)
			}
			return
		}
		_, _ = l.Offer(SourceFile, data) // the loader logs and counts refusals
	})
}

// WatchDir calls check now, whenever the mounted directory dir changes,
// and every poll interval, until ctx ends. check reads what it needs and
// does nothing when it is unchanged. The routing document, the cache salt
// key and the API keys are all mounted this way.
//
// It watches the directory, not a file: kubelet updates a ConfigMap or
// Secret volume by writing a new timestamped directory and swapping the
// ..data symlink, so a watch on the file would see it removed and never see
// the new one (and a subPath mount is never updated at all). The poll
// catches anything the watch misses — including a watch that failed to
// start or was lost with its directory — and re-adds the watch when it can.
func WatchDir(ctx context.Context, dir string, poll time.Duration, log logr.Logger, check func()) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	defer func() { _ = w.Close() }()
	watching := false
	addWatch := func() {
		if watching {
			return
		}
		if err := w.Add(dir); err != nil {
			log.V(1).Info("cannot watch directory yet; polling", "dir", dir, "error", err.Error())
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
			log.Error(err, "watching directory", "dir", dir)
		case <-ticker.C:
			addWatch()
			check()
		}
	}
}
