package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Build compiles the module in dir (relative to the e2e module) into out.
func Build(ctx context.Context, dir, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", dir, err, b)
	}
	return nil
}

// Process is one of the system's binaries, restartable.
type Process struct {
	Name string
	Bin  string
	Args []string
	Env  []string
	Log  string // stdout and stderr of every incarnation

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error
}

// Start starts the process; its output is appended to Log.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "---- %s start %s\n", p.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); f.Close() }()
	p.cmd, p.done = cmd, done
	return nil
}

// PID is the running incarnation's process ID, or 0 when it is not running.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Command runs the binary once with args and the process's environment (a subcommand such
// as `bookmarks-api keys create`), and returns its stdout; stderr is in the error.
func (p *Process) Command(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, p.Bin, args...)
	cmd.Env = append(os.Environ(), p.Env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %v: %w: %s", p.Name, args, err, stderr.String())
	}
	return stdout.String(), nil
}

// Kill sends SIGKILL and waits for the process to die: a crash.
func (p *Process) Kill() error { return p.signal(syscall.SIGKILL, 10*time.Second) }

// Stop sends SIGTERM and waits for a graceful exit.
func (p *Process) Stop() error { return p.signal(syscall.SIGTERM, 30*time.Second) }

func (p *Process) signal(sig syscall.Signal, wait time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		p.cmd = nil
		var ee *exec.ExitError
		if sig == syscall.SIGKILL || err == nil || (errors.As(err, &ee) && ee.ExitCode() == 0) {
			return nil
		}
		return fmt.Errorf("%s exited with %v after %v", p.Name, err, sig)
	case <-time.After(wait):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.cmd = nil
		return fmt.Errorf("%s did not exit within %v of %v", p.Name, wait, sig)
	}
}

// Restart stops the process gracefully and starts it again.
func (p *Process) Restart() error {
	if err := p.Stop(); err != nil {
		return err
	}
	return p.Start()
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// TempBin returns the path of a binary in dir.
func TempBin(dir, name string) string { return filepath.Join(dir, name) }
