// Package outbox delivers onceq's messages as files in a directory instead
// of sending them: the delivery for development and the embedded default.
// Each message is one file named for its downstream identity (an email's
// Message-ID, an SMS's key), published atomically and never replaced, so a
// redelivered job finds its message there and nothing is delivered twice.
package outbox

import (
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
)

// writeOnce publishes data as dir/name unless that file exists, creating
// dir as needed. Every name is resolved inside dir (os.Root): nothing in a
// message can place a file elsewhere.
func writeOnce(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if _, err := root.Stat(name); err == nil {
		return nil
	}
	tmp, err := writeTemp(root, data)
	if err != nil {
		return err
	}
	defer root.Remove(tmp)
	// Link, unlike rename, fails if name exists: of two concurrent writers
	// exactly one publishes, and a published file is never replaced.
	err = root.Link(tmp, name)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		// No hard links on this filesystem: rename is still atomic.
		err = root.Rename(tmp, name)
	}
	return err
}

// writeTemp writes data to a new hidden file in root, synced, so that what
// writeOnce publishes is complete even after a crash.
func writeTemp(root *os.Root, data []byte) (string, error) {
	for range 10 {
		name := ".tmp-" + rand.Text()
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, werr := f.Write(data)
		serr := f.Sync()
		cerr := f.Close()
		if err := errors.Join(werr, serr, cerr); err != nil {
			root.Remove(name)
			return "", err
		}
		return name, nil
	}
	return "", errors.New("cannot create a temporary file")
}
