package schemasnap

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Read reads the snapshot committed in fsys: every regular file in it, so that a file the
// migrations do not produce shows up in [Compare] as extra.
func Read(fsys fs.FS) (Snapshot, error) {
	snap := Snapshot{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		snap[p] = string(b)
		return nil
	})
	return snap, err
}

// Write writes snap into dir, creating it when missing, and removes the .sql files there
// (tables.sql's directory and functions/) that snap does not have, such as the file of a
// function a migration dropped.
func Write(dir string, snap Snapshot) error {
	if err := os.MkdirAll(filepath.Join(dir, FunctionsDir), 0o755); err != nil {
		return err
	}
	for _, sub := range []string{".", FunctionsDir} {
		old, err := filepath.Glob(filepath.Join(dir, sub, "*.sql"))
		if err != nil {
			return err
		}
		for _, f := range old {
			rel := path.Join(sub, filepath.Base(f))
			if _, ok := snap[rel]; !ok {
				if err := os.Remove(f); err != nil {
					return err
				}
			}
		}
	}
	for p, text := range snap {
		if strings.Contains(p, "..") {
			continue
		}
		f := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}
