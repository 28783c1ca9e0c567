"""What one evaluation of a kernel finds, inside a worker: the steps (compile, validate, benchmark) over an
Executor, the checks, device buffers with guards, the sizes generality samples, yardsticks, the phase records, the
user's kernel as a reference, profiles read. Imports `core`, `confine`, `problems`, `backends`."""
