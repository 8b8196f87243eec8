package node

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// volumeFile is one file of a ConfigMap, Secret, downward API or projected volume.
type volumeFile struct {
	data []byte
	mode os.FileMode
}

// dataLink is the symbolic link that names a volume's current content directory. A
// container sees the volume's files through links into it (name → ..data/name), so one
// rename of dataLink replaces every file at once, as the kubelet's volumes do.
const dataLink = "..data"

// writeAtomic makes dir show exactly files (relative paths, possibly with directories),
// switching from the previous content in one step: the new content goes into a new
// directory "..<time>", then dataLink is renamed over to point at it, then the old
// directory is removed. Nothing is written when the content is unchanged.
func writeAtomic(dir string, files map[string]volumeFile) error {
	for p := range files {
		// As the API validates item paths: relative, not starting with "..".
		if clean := filepath.Clean(p); filepath.IsAbs(p) || clean == "." || strings.HasPrefix(clean, "..") {
			return fmt.Errorf("invalid file path %q in volume", p)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if old != "" && sameContent(filepath.Join(dir, old), files) {
		return nil
	}
	stamp := time.Now().UTC().Format("..2006_01_02_15_04_05.")
	next, err := os.MkdirTemp(dir, stamp)
	if err != nil {
		return err
	}
	if err := os.Chmod(next, 0o755); err != nil {
		return err
	}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		f := files[p]
		path := filepath.Join(next, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(path, f.mode); err != nil { // not narrowed by the umask
			return err
		}
	}
	tmp := filepath.Join(dir, dataLink+"_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(next), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataLink)); err != nil {
		return err
	}
	// The top-level names: links into dataLink for what is there now, none for what is gone.
	want := map[string]bool{}
	for p := range files {
		want[strings.SplitN(filepath.ToSlash(p), "/", 2)[0]] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") || want[name] {
			continue
		}
		if target, err := os.Readlink(filepath.Join(dir, name)); err == nil && strings.HasPrefix(target, dataLink+"/") {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
	for name := range want {
		link := filepath.Join(dir, name)
		if target, err := os.Readlink(link); err == nil && target == dataLink+"/"+name {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink(dataLink+"/"+name, link); err != nil {
			return err
		}
	}
	if old != "" && old != filepath.Base(next) {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// sameContent says whether dir holds exactly files, with the same modes.
func sameContent(dir string, files map[string]volumeFile) bool {
	seen := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		f, ok := files[rel]
		if !ok {
			return errDiffers
		}
		info, err := d.Info()
		if err != nil || info.Mode().Perm() != f.mode.Perm() {
			return errDiffers
		}
		data, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(data, f.data) {
			return errDiffers
		}
		seen++
		return nil
	})
	return err == nil && seen == len(files)
}

var errDiffers = errors.New("differs")
