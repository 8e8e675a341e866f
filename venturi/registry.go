package venturi

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/venturi-dev/venturi/internal/jobrun"
)

// Register adds task type T to w. S and C are inferred from T's Handle method, so the
// call is Register[FetchBookmark](w). It returns an error if the kind is empty or already
// registered, if w has started, if T's merge method uses another carry type than its
// handler, or if T has both a merge method and a [MergeRule].
func Register[T Handler[S, C], S, C any](w *Worker[S]) error {
	return register(w, func(ctx context.Context, task T, run *Run[C], state S) (Outcome, error) {
		return task.Handle(ctx, run, state)
	})
}

// MustRegister is like [Register] but panics on error, for registrations in main that
// cannot fail at run time.
func MustRegister[T Handler[S, C], S, C any](w *Worker[S]) {
	if err := Register[T](w); err != nil {
		panic(err)
	}
}

// RegisterFunc adds task type T to w with handle as its handler. It is for task types
// defined in another package (a shared producer module), to which the worker cannot add
// a Handle method: T, S and C are inferred from handle, and T keeps its own Kind,
// DedupKey and Merge. It returns the errors of [Register], and one for a nil handle.
func RegisterFunc[T Task, S, C any](w *Worker[S], handle HandlerFunc[T, S, C]) error {
	if handle == nil {
		return errors.New("venturi: RegisterFunc with a nil handler")
	}
	return register(w, handle)
}

// MustRegisterFunc is like [RegisterFunc] but panics on error.
func MustRegisterFunc[T Task, S, C any](w *Worker[S], handle HandlerFunc[T, S, C]) {
	if err := RegisterFunc(w, handle); err != nil {
		panic(err)
	}
}

// registration runs one kind's handler: it decodes the claimed job into the task type
// and runs it against the worker's state.
type registration struct {
	kind      string
	limits    Limits     // the type's Limits (see Limiter)
	singleton *Singleton // the type's Singleton (see Supervised); nil for other kinds
	zero      Task       // the zero value of the task type: a singleton's payload
	typ       reflect.Type
	merge     string // what a collision of an enqueue from SQL may decide (merger.sqlMerge)
	mergeDue  Due    // and its due-time rule
	run       func(ctx context.Context, e *runner, j *jobrun.Job) *jobrun.End
}

// kindOf calls Kind on T's zero value, or on a new value when T is a pointer type.
func kindOf[T Task]() string {
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		return reflect.New(t.Elem()).Interface().(Task).Kind()
	}
	var zero T
	return zero.Kind()
}

func register[T Task, S, C any](w *Worker[S], handle HandlerFunc[T, S, C]) error {
	var zero T
	kind := kindOf[T]()
	if kind == "" {
		return fmt.Errorf("venturi: register %T: %w", zero, ErrEmptyKind)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("venturi: register after Start")
	}
	if _, dup := w.reg[kind]; dup {
		return fmt.Errorf("venturi: kind %q registered twice", kind)
	}
	m, err := mergerFor(reflect.TypeFor[T]())
	if err != nil {
		return err
	}
	if m.carryType != nil && m.carryType != reflect.TypeFor[C]() {
		return fmt.Errorf("venturi: %T.Merge sees carry %v but its handler's carry is %v", zero, m.carryType, reflect.TypeFor[C]())
	}
	limits, err := limitsOf[T]()
	if err != nil {
		return fmt.Errorf("venturi: register %T: %w", zero, err)
	}
	singleton, err := singletonOf[T]()
	if err != nil {
		return fmt.Errorf("venturi: register %T: %w", zero, err)
	}
	var zeroTask Task = zero
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		zeroTask = reflect.New(t.Elem()).Interface().(Task)
	}
	state := w.state
	merge, mergeDue := m.sqlMerge()
	w.reg[kind] = &registration{kind: kind, limits: limits, singleton: singleton, zero: zeroTask,
		typ: reflect.TypeFor[T](), merge: merge, mergeDue: mergeDue,
		run: func(ctx context.Context, e *runner, j *jobrun.Job) *jobrun.End {
			return runTask(ctx, e, j, state, handle)
		}}
	w.kinds = append(w.kinds, kind)
	slices.Sort(w.kinds)
	return nil
}
